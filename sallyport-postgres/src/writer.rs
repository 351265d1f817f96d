//! The writers: tasks that each take every write queued for them and apply them as one
//! transaction (group commit). While a batch commits, new writes queue; the next batch
//! takes them all, so 16 concurrent calls share a commit instead of paying one each.
//!
//! Two writers share the intents' queue (while one waits for its batch's flush, the other
//! can send the next), one takes everything else (dispatch notes, records, observe calls,
//! approval changes), so intents and records commit side by side on their own connections:
//! a batch of intents waits for its synchronous commit (its fsync) without holding back the
//! records of calls already sent, and records never wait behind an fsync they do not need.
//! Nothing is weakened: a batch holding a durable intent still commits synchronously before
//! any of its calls is answered, and a record batch commits synchronously when it holds an
//! approval change or a durable observe call; otherwise it never did (a server crash may
//! lose its last milliseconds of records, never an intent). Intents and records never wait
//! on each other's locks: an intent only inserts a new attempt row; the chain head, the approval
//! rows and every update of an existing attempt row belong to the record writer. A write
//! for an attempt reaches the record writer after its intent was answered (the intent
//! writer keeps the epoch before it answers, so the write is fenced by it); a cancelled
//! call's record, made while its intent was still queued, waits there until it is.
//!
//! A batch is one transaction sent in two flights, the statements of each sent without
//! waiting for one another's answers: `BEGIN`, attempt rows (intents and observe calls),
//! dispatch notes, attempt closes (fenced by epoch) and the chain head locked `FOR UPDATE`;
//! then the records, the head moved and signed, and `COMMIT`. A dispatch note for an
//! attempt the same batch closes is folded into the close. Approval compare-and-sets and
//! the reconciler's closes run one by one between the flights (approvals in approval-id
//! order), and the head is then locked after them, so it is held for the inserts and the
//! commit only. A taken key or a fenced close is a row that was not returned, never an SQL
//! error, so one bad write does not abort the others.

use std::collections::HashMap;
use std::sync::Arc;

use deadpool_postgres::Client;
use futures_util::future::join_all;
use sallyport_core::approval::Transition;
use sallyport_core::journal::{AttemptId, chain_hash};
use sallyport_core::journal::{AuditEvent, AuditRecord, ChainHead, Intent, JournalError};
use tokio::sync::{Mutex, mpsc, oneshot};
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

/// A writer task: batches until the journal is dropped (its queue then closes) and every
/// queued write has been applied. Several writers may share one queue: each takes what is
/// queued when it gets the queue, and lets go of it while its batch commits, so the next
/// writer's batch can be on its way while this one waits for its flush.
pub(crate) async fn run(shared: Arc<Shared>, queue: Arc<Mutex<mpsc::UnboundedReceiver<Op>>>) {
    loop {
        let ops = {
            let mut queue = queue.lock().await;
            let Some(first) = queue.recv().await else {
                return;
            };
            let mut ops = vec![first];
            while ops.len() < MAX_BATCH {
                match queue.try_recv() {
                    Ok(op) => ops.push(op),
                    Err(_) => break,
                }
            }
            ops
        };
        shared.after_their_intents(&ops).await;
        let outcome = write_batch(&shared, &ops).await;
        answer(&shared, ops, outcome);
    }
}

/// One transaction for the batch; every write's outcome, or the failure that undid them all.
async fn write_batch(shared: &Shared, ops: &[Op]) -> Result<Vec<Done>, PostgresError> {
    let client = shared
        .pool
        .get()
        .await
        .map_err(|e| shared.redactor.other(&e))?;
    let outcome = apply_batch(shared, &client, ops).await;
    if outcome.is_err() && !client.is_closed() {
        // A statement failed, so the transaction may still be open (aborted): end it before
        // the connection goes back to the pool. Where the failure came with a pipelined
        // `COMMIT`, the server already rolled back and only warns that none is open.
        let _ = client.batch_execute("ROLLBACK").await;
    }
    outcome
}

/// The batch's statements, sent in two flights, each without waiting for the answers of
/// the statements before it (a round trip costs two wake-ups and two context switches,
/// which on two cores is CPU the calls need): first `BEGIN`, the attempt rows, the dispatch
/// notes, the closes and the chain-head lock; then the records, the head and `COMMIT`. An
/// approval or a reconciler's close, each a compare-and-set that reads what the one before
/// it wrote, runs one at a time between the two, and the head is then locked after them.
/// A statement that fails aborts the transaction, so the `COMMIT` sent behind it rolls
/// back: the batch is written whole or not at all, as with one statement at a time.
async fn apply_batch(
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
    let at = crate::now();
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

    // Flight 1. A batch nothing is sent on the strength of commits asynchronously: a server
    // crash may lose its last few milliseconds of records (never a durable intent: a
    // synchronous commit flushes everything before it). A process crash loses nothing.
    let begin = if ops.iter().any(Op::is_durable) {
        "BEGIN"
    } else {
        "BEGIN; SET LOCAL synchronous_commit TO off"
    };
    let rows = ops.iter().enumerate().filter_map(|(i, op)| {
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
    // `join!` polls in order, and each statement is sent when first polled: the server
    // receives them in this order.
    let (began, rows, notes, closes, head) = futures_util::join!(
        client.batch_execute(begin),
        join_all(rows),
        join_all(notes),
        join_all(closes),
        head,
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
    let mut records = Vec::with_capacity(appending.len());
    let mut chain_end = None;
    if let Some(head) = head.filter(|_| !appending.is_empty()) {
        let mut seq: i64 = head.get(0);
        let mut hash: String = head.get(1);
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
        chain_end = Some((seq, hash));
    }
    let insert = prepare_if(!records.is_empty(), sql::INSERT_RECORD)
        .await
        .map_err(pg)?;
    let set_head = prepare_if(chain_end.is_some(), sql::SET_HEAD)
        .await
        .map_err(pg)?;
    let signed = match (&chain_end, &shared.signing_key) {
        (Some((seq, hash)), Some(key)) => Some(key.sign(
            &ChainHead {
                count: seq.cast_unsigned(),
                hash: hash.clone(),
            },
            at.clone(),
        )),
        _ => None,
    };
    let insert_signed = prepare_if(signed.is_some(), sql::INSERT_SIGNED_HEAD)
        .await
        .map_err(pg)?;

    // Flight 2.
    let inserted = records.iter().filter_map(|(_, json, record)| {
        let insert = insert.as_ref()?;
        Some(async move {
            let seq = record.seq.cast_signed();
            client
                .execute(
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
        })
    });
    let moved = async {
        match (&set_head, &chain_end) {
            (Some(set), Some((seq, hash))) => Some(client.execute(set, &[seq, hash]).await),
            _ => None,
        }
    };
    let signed_row = async {
        match (&insert_signed, &signed, &chain_end) {
            (Some(statement), Some(signed), Some((seq, _))) => Some(
                client
                    .execute(
                        statement,
                        &[
                            seq,
                            &signed.hash,
                            &signed.key_id,
                            &signed.signature,
                            &signed.signed_at,
                        ],
                    )
                    .await,
            ),
            _ => None,
        }
    };
    let (inserted, moved, signed_row, committed) = futures_util::join!(
        join_all(inserted),
        moved,
        signed_row,
        client.batch_execute("COMMIT"),
    );
    for result in inserted {
        result.map_err(pg)?;
    }
    moved.transpose().map_err(pg)?;
    signed_row.transpose().map_err(pg)?;
    committed.map_err(pg)?;
    for (i, _, record) in records {
        done[i] = match std::mem::replace(&mut done[i], Done::Written) {
            Done::Transition(t, _) => Done::TransitionRecord(t, Box::new(record)),
            _ => Done::Record(Box::new(record)),
        };
    }
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
