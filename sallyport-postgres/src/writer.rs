//! The writers: two tasks per journal, each taking every write queued for it and applying
//! them as one transaction (group commit). While a batch commits, new writes queue; the next
//! batch takes them all, so 16 concurrent calls share a commit instead of paying one each.
//!
//! One writer takes the intents, the other everything else (dispatch notes, records,
//! observe calls, approval changes), so the two commit side by side on two connections:
//! a batch of intents waits for its synchronous commit (its fsync) without holding back the
//! records of calls already sent, and records never wait behind an fsync they do not need.
//! Nothing is weakened: a batch holding a durable intent still commits synchronously before
//! any of its calls is answered, and a record batch commits synchronously when it holds an
//! approval change or a durable observe call; otherwise it never did (a server crash may
//! lose its last milliseconds of records, never an intent). The two never wait on each
//! other's locks: an intent only inserts a new attempt row; the chain head, the approval
//! rows and every update of an existing attempt row belong to the record writer. A write
//! for an attempt reaches the record writer after its intent was answered (the intent
//! writer keeps the epoch before it answers, so the write is fenced by it); a cancelled
//! call's record, made while its intent was still queued, waits there until it is.
//!
//! A batch runs in five steps, the first three pipelined (their statements sent without
//! waiting for one another's answers): attempt rows (intents and observe calls), dispatch
//! notes, attempt closes (fenced by epoch); then the approval store's compare-and-sets, one
//! by one in approval-id order; then the chain: the head row locked `FOR UPDATE`, the
//! records inserted, the head moved and signed. The chain lock is taken last, so it is held
//! for the inserts and the commit only. A taken key or a fenced close is a row that was not
//! returned, never an SQL error, so one bad write does not abort the others.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::future::join_all;
use sallyport_core::approval::Transition;
use sallyport_core::journal::{AttemptId, chain_hash};
use sallyport_core::journal::{AuditEvent, AuditRecord, ChainHead, Intent, JournalError};
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::types::ToSql;

use crate::approvals::ApprovalOp;
use crate::error::PostgresError;
use crate::shared::Shared;
use crate::sql;

/// Most operations applied in one transaction.
pub const MAX_BATCH: usize = 512;

/// Where an operation's answer goes.
pub(crate) type Reply<T> = oneshot::Sender<Result<T, JournalError>>;

/// One queued write.
pub(crate) enum Op {
    /// An intent to write.
    Intent(Box<Intent>, Reply<()>),
    /// A dispatch to note (nobody waits).
    Dispatch(AttemptId, u32),
    /// A record to append; no reply for a detached append.
    Append(Box<AuditEvent>, Option<Reply<AuditRecord>>),
    /// An observe call's closed attempt row and its record, written together.
    Observe(Box<Intent>, Box<AuditEvent>, Reply<AuditRecord>),
    /// A change to the approval store, applied as a compare-and-set inside the batch.
    Approval(Box<ApprovalOp>),
    /// A reconciler's record, appended only while no record closes its attempt.
    Settle(Box<AuditEvent>, Reply<bool>),
}

impl Op {
    /// Whether the batch holding it must commit synchronously.
    fn is_durable(&self) -> bool {
        // Approval changes are decisions someone will act on: always committed durably.
        matches!(self, Self::Intent(intent, _) | Self::Observe(intent, ..) if intent.durable)
            || matches!(self, Self::Approval(_))
    }

    /// The audit event this operation appends, if it appends one.
    fn event(&self) -> Option<&AuditEvent> {
        match self {
            Self::Append(event, _) | Self::Observe(_, event, _) | Self::Settle(event, _) => {
                Some(event)
            }
            Self::Approval(op) => op.event(),
            Self::Intent(..) | Self::Dispatch(..) => None,
        }
    }
}

/// What one write came to, before the commit.
pub(crate) enum Done {
    /// Written (an intent: at this epoch).
    Written,
    /// A record, written.
    Record(Box<AuditRecord>),
    /// The attempt id or key is taken.
    Duplicate,
    /// The attempt (or approval claim) was taken over: the write was refused.
    Fenced,
    /// An approval compare-and-set: its outcome, and whether its event is appended.
    Transition(Box<Transition>, bool),
    /// A record appended for an approval change (park, settle, an applied decision).
    TransitionRecord(Box<Transition>, Box<AuditRecord>),
}

/// The writer task: batches until the journal is dropped (its queue then closes) and every
/// queued write has been applied.
pub(crate) async fn run(shared: Arc<Shared>, mut queue: mpsc::UnboundedReceiver<Op>) {
    while let Some(first) = queue.recv().await {
        let mut ops = vec![first];
        while ops.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(op) => ops.push(op),
                Err(_) => break,
            }
        }
        shared.after_their_intents(&ops).await;
        let outcome = write_batch(&shared, &ops).await;
        answer(&shared, ops, outcome);
    }
}

/// One transaction for the batch; every write's outcome, or the failure that undid them all.
async fn write_batch(shared: &Shared, ops: &[Op]) -> Result<Vec<Done>, PostgresError> {
    let redact = &shared.redactor;
    let pg = |e: tokio_postgres::Error| redact.postgres(&e);
    let mut client = shared.pool.get().await.map_err(|e| redact.other(&e))?;
    let tx = client.transaction().await.map_err(pg)?;
    if !ops.iter().any(Op::is_durable) {
        // Nothing in the batch is sent on the strength of this commit: a server crash may
        // lose its last few milliseconds of records (never a durable intent: a synchronous
        // commit flushes everything before it). A process crash loses nothing.
        tx.batch_execute("SET LOCAL synchronous_commit TO off")
            .await
            .map_err(pg)?;
    }
    let epochs = shared.epochs_snapshot(ops);
    let lease_ms = shared.lease_ms();
    let at = crate::now();
    let mut done: Vec<Done> = ops.iter().map(|_| Done::Written).collect();

    // 1. Attempt rows.
    let insert_intent = tx.prepare_cached(sql::INSERT_INTENT).await.map_err(pg)?;
    let insert_closed = tx.prepare_cached(sql::INSERT_CLOSED).await.map_err(pg)?;
    let rows = join_all(ops.iter().enumerate().filter_map(|(i, op)| {
        let (intent, event) = match op {
            Op::Intent(intent, _) => (intent, None),
            Op::Observe(intent, event, _) => (intent, Some(event)),
            _ => return None,
        };
        let (insert_intent, insert_closed, tx, at, owner) =
            (&insert_intent, &insert_closed, &tx, &at, &shared.owner);
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
            let statement = match event {
                None => {
                    params.push(Box::new(at.clone()));
                    params.push(Box::new(owner.clone()));
                    params.push(Box::new(lease_ms));
                    insert_intent
                }
                Some(event) => {
                    params.push(Box::new(event.phase.as_str().to_owned()));
                    params.push(Box::new(i64::from(event.dispatches)));
                    params.push(Box::new(event.status.as_str().to_owned()));
                    params.push(Box::new(at.clone()));
                    params.push(Box::new(owner.clone()));
                    insert_closed
                }
            };
            let refs: Vec<&(dyn ToSql + Sync)> = params
                .iter()
                .map(|p| p.as_ref() as &(dyn ToSql + Sync))
                .collect();
            (i, tx.query(statement, &refs).await)
        })
    }))
    .await;
    for (i, result) in rows {
        if result.map_err(pg)?.is_empty() {
            done[i] = Done::Duplicate;
        }
    }

    // 2. Dispatch notes.
    let note = tx.prepare_cached(sql::NOTE_DISPATCH).await.map_err(pg)?;
    let notes = join_all(ops.iter().filter_map(|op| {
        let Op::Dispatch(attempt, n) = op else {
            return None;
        };
        let epoch = epochs.get(attempt.as_str()).copied();
        let (note, tx, at) = (&note, &tx, &at);
        Some(async move {
            tx.execute(note, &[&attempt.as_str(), &i64::from(*n), at, &epoch])
                .await
        })
    }))
    .await;
    for result in notes {
        result.map_err(pg)?;
    }

    // 3. Attempt closes, fenced by the epoch this journal holds.
    let close = tx.prepare_cached(sql::CLOSE_ATTEMPT).await.map_err(pg)?;
    let closes = join_all(ops.iter().enumerate().filter_map(|(i, op)| {
        let Op::Append(event, _) = op else {
            return None;
        };
        let epoch = epochs.get(event.attempt_id.as_str()).copied();
        let (close, tx, at) = (&close, &tx, &at);
        Some(async move {
            let result = tx
                .query(
                    close,
                    &[
                        &event.attempt_id.as_str(),
                        &event.phase.as_str(),
                        &event.status.as_str(),
                        &i64::from(event.dispatches),
                        at,
                        &epoch,
                    ],
                )
                .await;
            (i, epoch.is_some(), result)
        })
    }))
    .await;
    for (i, fenced_if_missing, result) in closes {
        if result.map_err(pg)?.is_empty() && fenced_if_missing {
            done[i] = Done::Fenced;
        }
    }
    // The reconciler's closes: one statement at a time, each a compare-and-set.
    for (i, op) in ops.iter().enumerate() {
        let Op::Settle(event, _) = op else {
            continue;
        };
        let rows = tx
            .query(
                sql::SETTLE_ATTEMPT,
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

    // 4. Approval compare-and-sets, one after another (each reads what the last wrote).
    // Rows are locked in approval-id order, so two processes' batches never wait on each
    // other in a cycle; changes to one approval keep the order they were made in.
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
        done[i] = crate::approvals::apply(shared, &tx, op, &epochs, lease_ms, &at)
            .await
            .map_err(|e| e.into_postgres(shared))?;
    }

    // 5. The chain.
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
    if !appending.is_empty() {
        let head = tx.query_one(sql::LOCK_HEAD, &[]).await.map_err(pg)?;
        let mut seq: i64 = head.get(0);
        let mut hash: String = head.get(1);
        let mut records = Vec::with_capacity(appending.len());
        for &i in &appending {
            let Some(event) = ops[i].event() else {
                continue;
            };
            let json = serde_json::to_string(event)
                .map_err(|e| PostgresError::own(format!("cannot serialize an audit event: {e}")))?;
            seq += 1;
            let next = chain_hash(&hash, seq.cast_unsigned(), &json);
            records.push((
                i,
                json,
                AuditRecord {
                    seq: seq.cast_unsigned(),
                    prev_hash: std::mem::replace(&mut hash, next.clone()),
                    hash: next,
                    event: event.clone(),
                },
            ));
        }
        let insert = tx.prepare_cached(sql::INSERT_RECORD).await.map_err(pg)?;
        let inserted = join_all(records.iter().map(|(_, json, record)| {
            let (insert, tx) = (&insert, &tx);
            async move {
                let seq = record.seq.cast_signed();
                tx.execute(
                    insert,
                    &[
                        &seq,
                        &record.event.receipt_id.as_str(),
                        &record.event.attempt_id.as_str(),
                        &record.prev_hash,
                        &record.hash,
                        json,
                    ],
                )
                .await
            }
        }))
        .await;
        for result in inserted {
            result.map_err(pg)?;
        }
        tx.execute(sql::SET_HEAD, &[&seq, &hash])
            .await
            .map_err(pg)?;
        if let Some(key) = &shared.signing_key {
            let signed = key.sign(
                &ChainHead {
                    count: seq.cast_unsigned(),
                    hash: hash.clone(),
                },
                at.clone(),
            );
            tx.execute(
                sql::INSERT_SIGNED_HEAD,
                &[
                    &seq,
                    &signed.hash,
                    &signed.key_id,
                    &signed.signature,
                    &signed.signed_at,
                ],
            )
            .await
            .map_err(pg)?;
        }
        for (i, _, record) in records {
            done[i] = match std::mem::replace(&mut done[i], Done::Written) {
                Done::Transition(t, _) => Done::TransitionRecord(t, Box::new(record)),
                _ => Done::Record(Box::new(record)),
            };
        }
    }
    tx.commit().await.map_err(pg)?;
    Ok(done)
}

/// Sends each write its outcome once the batch is committed (or failed), and keeps the
/// epochs of attempts this journal now holds.
fn answer(shared: &Shared, ops: Vec<Op>, outcome: Result<Vec<Done>, PostgresError>) {
    let intents: Vec<String> = ops
        .iter()
        .filter_map(|op| match op {
            Op::Intent(intent, _) => Some(intent.attempt_id.as_str().to_owned()),
            _ => None,
        })
        .collect();
    let done = match outcome {
        Ok(done) => done,
        Err(e) => {
            shared.intents_answered(intents.iter().map(String::as_str));
            for op in ops {
                fail(op, &e);
            }
            return;
        }
    };
    let mut held: HashMap<String, Option<i64>> = HashMap::new();
    // Answered once the epochs are kept: the call's next write goes to the other writer,
    // which must find the epoch to fence it by.
    let mut written = Vec::new();
    for (op, done) in ops.into_iter().zip(done) {
        match (op, done) {
            (Op::Intent(intent, reply), Done::Written) => {
                held.insert(intent.attempt_id.as_str().to_owned(), Some(1));
                written.push(reply);
            }
            (Op::Intent(_, reply), _) => {
                let _ = reply.send(Err(JournalError::DuplicateKey));
            }
            (Op::Observe(_, _, reply), Done::Record(record)) => {
                let _ = reply.send(Ok(*record));
            }
            (Op::Observe(_, _, reply), _) => {
                let _ = reply.send(Err(JournalError::DuplicateKey));
            }
            (Op::Append(event, reply), done) => {
                held.insert(event.attempt_id.as_str().to_owned(), None);
                let result = match done {
                    Done::Record(record) => Ok(*record),
                    _ => Err(JournalError::Fenced),
                };
                match reply {
                    Some(reply) => {
                        let _ = reply.send(result);
                    }
                    None => {
                        if let Err(e) = result {
                            tracing::error!(attempt = %event.attempt_id, error = %e, "detached audit append failed");
                        }
                    }
                }
            }
            (Op::Approval(op), done) => op.answer(done, &mut held),
            (Op::Settle(event, reply), done) => {
                held.insert(event.attempt_id.as_str().to_owned(), None);
                let _ = reply.send(Ok(matches!(done, Done::Record(_))));
            }
            (Op::Dispatch(..), _) => {}
        }
    }
    shared.update_epochs(held);
    shared.intents_answered(intents.iter().map(String::as_str));
    for reply in written {
        let _ = reply.send(Ok(()));
    }
}

/// Answers a write whose batch failed.
fn fail(op: Op, e: &PostgresError) {
    let error = || JournalError::Write(Box::new(e.clone()));
    match op {
        Op::Intent(_, reply) => {
            let _ = reply.send(Err(error()));
        }
        Op::Observe(_, _, reply) | Op::Append(_, Some(reply)) => {
            let _ = reply.send(Err(error()));
        }
        Op::Settle(_, reply) => {
            let _ = reply.send(Err(error()));
        }
        Op::Append(event, None) => {
            tracing::error!(attempt = %event.attempt_id, error = %e, "detached audit append failed");
        }
        Op::Dispatch(attempt, _) => {
            tracing::warn!(attempt = %attempt, error = %e, "dispatch note not written");
        }
        Op::Approval(op) => op.fail(error()),
    }
}
