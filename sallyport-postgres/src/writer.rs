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
//!
//! Two kinds of batch take one flight. One that appends no record (intents, dispatch
//! notes) sends its `COMMIT` behind its rows. One of closes and their records, when this
//! journal knows the head it last committed, chains the records on that head before
//! anything is sent, and moves the head with a compare-and-set: should another process
//! have moved the head, or taken over an attempt a close is fenced from, the statement
//! fails on purpose, the transaction rolls back, and the batch goes again in two flights
//! (see [`single_flight`]). A journal alone on its database thus pays one round trip per
//! batch; several appending at once fall back to reading the head for a while.

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
    if outcome.is_err() {
        // Whether the batch moved the head is not known.
        shared.forget_head();
        if !client.is_closed() {
            // A statement failed, so the transaction may still be open (aborted): end it
            // before the connection goes back to the pool. Where the failure came with a
            // pipelined `COMMIT`, the server already rolled back and only warns that none
            // is open.
            let _ = client.batch_execute("ROLLBACK").await;
        }
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
/// back: the batch is written whole or not at all, as with one statement at a time. A
/// batch with no record to chain and nothing to read back sends its `COMMIT` in the first
/// flight, so a batch of intents costs one round trip (and its flush), not two.
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

/// What a batch sent in one flight needs of [`apply_batch`]'s reading of it.
struct Batch<'a> {
    ops: &'a [Op],
    begin: &'static str,
    /// Attempts the batch closes → the highest request number noted for each.
    closed_here: &'a HashMap<&'a str, u32>,
    epochs: &'a HashMap<String, i64>,
    at: &'a String,
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
async fn single_flight(
    shared: &Shared,
    client: &Client,
    batch: &Batch<'_>,
    (seq, hash): ChainEnd,
) -> Result<Option<Vec<Done>>, PostgresError> {
    let pg = |e: tokio_postgres::Error| shared.redactor.postgres(&e);
    let ops = batch.ops;
    let has_note = ops.iter().any(|op| {
        matches!(op, Op::Dispatch(attempt, _) if !batch.closed_here.contains_key(attempt.as_str()))
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
    let (records, chain_end) = chain(ops, &appending, seq, hash.clone())?;
    let tail = Tail::prepare(shared, client, &records, chain_end, batch.at).await?;

    let at = batch.at;
    let notes = ops.iter().filter_map(|op| {
        let Op::Dispatch(attempt, n) = op else {
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
        let Op::Append(event, _) = op else {
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
                .query(&move_head, &[&seq, &hash, end, end_hash])
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

/// A record chained: its operation's index, its event as stored, and the record.
type Chained = (usize, String, AuditRecord);

/// A chain's end: the last record's sequence number and hash.
pub(crate) type ChainEnd = (i64, String);

/// The records of the operations at `appending`, chained on from the head at `seq`, `hash`;
/// and the chain's new end.
fn chain(
    ops: &[Op],
    appending: &[usize],
    mut seq: i64,
    mut hash: String,
) -> Result<(Vec<Chained>, Option<ChainEnd>), PostgresError> {
    let mut records = Vec::with_capacity(appending.len());
    for &i in appending {
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
    Ok((records, Some((seq, hash))))
}

/// The end of a batch that appends: its record inserts and its signed head, prepared (how
/// the head moves is the caller's: set under its lock, or compare-and-set).
struct Tail {
    insert: Option<tokio_postgres::Statement>,
    insert_signed: Option<tokio_postgres::Statement>,
    signed: Option<sallyport_core::journal::SignedHead>,
    chain_end: Option<ChainEnd>,
}

impl Tail {
    /// The statements a batch ending the chain at `chain_end` needs, and its head signed.
    async fn prepare(
        shared: &Shared,
        client: &Client,
        records: &[Chained],
        chain_end: Option<ChainEnd>,
        at: &str,
    ) -> Result<Self, PostgresError> {
        let pg = |e: tokio_postgres::Error| shared.redactor.postgres(&e);
        let prepare_if = |needed: bool, sql: &'static str| async move {
            if needed {
                client.prepare_cached(sql).await.map(Some)
            } else {
                Ok(None)
            }
        };
        let signed = match (&chain_end, &shared.signing_key) {
            (Some((seq, hash)), Some(key)) => Some(key.sign(
                &ChainHead {
                    count: seq.cast_unsigned(),
                    hash: hash.clone(),
                },
                at.to_owned(),
            )),
            _ => None,
        };
        Ok(Self {
            insert: prepare_if(!records.is_empty(), sql::INSERT_RECORD)
                .await
                .map_err(pg)?,
            insert_signed: prepare_if(signed.is_some(), sql::INSERT_SIGNED_HEAD)
                .await
                .map_err(pg)?,
            signed,
            chain_end,
        })
    }

    /// Inserts the records, each statement sent without waiting for the one before.
    async fn insert_records(
        &self,
        client: &Client,
        records: &[Chained],
    ) -> Result<(), tokio_postgres::Error> {
        let Some(insert) = &self.insert else {
            return Ok(());
        };
        let inserted = records.iter().map(|(_, json, record)| async move {
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
        });
        for result in join_all(inserted).await {
            result?;
        }
        Ok(())
    }

    /// Writes the signed head, when the journal signs.
    async fn insert_signed(&self, client: &Client) -> Result<(), tokio_postgres::Error> {
        if let (Some(statement), Some(signed), Some((seq, _))) =
            (&self.insert_signed, &self.signed, &self.chain_end)
        {
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
                .await?;
        }
        Ok(())
    }
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
