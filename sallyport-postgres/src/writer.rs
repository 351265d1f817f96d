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

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use deadpool_postgres::{ClientWrapper, Object};
use futures_util::future::{OptionFuture, join_all};
use sallyport_core::approval::Transition;
use sallyport_core::journal::{AttemptId, chain_hash};
use sallyport_core::journal::{AuditEvent, AuditRecord, ChainHead, Intent, JournalError};
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};

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

/// One transaction for the batch on a connection from the pool; every write's outcome, or
/// the failure that undid them all. A connection whose batch failed is closed, not handed
/// back: its transaction may still be open.
async fn write_batch(shared: &Shared, ops: &[Op]) -> Result<Vec<Done>, PostgresError> {
    let client = shared
        .pool
        .get()
        .await
        .map_err(|e| shared.redactor.other(&e))?;
    let outcome = transact(shared, &client, ops).await;
    if outcome.is_err() {
        drop(Object::take(client));
    }
    outcome
}

/// The statements a batch may run, prepared on its connection (once: the pool's
/// connections keep them cached).
struct Prepared {
    insert_intents: Statement,
    insert_closed: Statement,
    note_dispatches: Statement,
    close_attempts: Statement,
    settle_attempts: Statement,
    lock_head: Statement,
    insert_records: Statement,
    set_head: Statement,
    insert_signed_head: Statement,
}

impl Prepared {
    async fn on(client: &ClientWrapper) -> Result<Self, tokio_postgres::Error> {
        let (
            insert_intents,
            insert_closed,
            note_dispatches,
            close_attempts,
            settle_attempts,
            lock_head,
            insert_records,
            set_head,
            insert_signed_head,
        ) = futures_util::try_join!(
            client.prepare_cached(sql::INSERT_INTENTS),
            client.prepare_cached(sql::INSERT_CLOSED_ROWS),
            client.prepare_cached(sql::NOTE_DISPATCHES),
            client.prepare_cached(sql::CLOSE_ATTEMPTS),
            client.prepare_cached(sql::SETTLE_ATTEMPTS),
            client.prepare_cached(sql::LOCK_HEAD),
            client.prepare_cached(sql::INSERT_RECORDS),
            client.prepare_cached(sql::SET_HEAD),
            client.prepare_cached(sql::INSERT_SIGNED_HEAD),
        )?;
        Ok(Self {
            insert_intents,
            insert_closed,
            note_dispatches,
            close_attempts,
            settle_attempts,
            lock_head,
            insert_records,
            set_head,
            insert_signed_head,
        })
    }
}

/// Splits a batch's writes of one kind into rounds: round `k` holds the `k`-th write naming
/// each attempt, in the order they were made. One statement writes a round, so no statement
/// names an attempt twice, and the rounds run one after another, as the writes were made.
fn rounds<'a>(writes: impl IntoIterator<Item = (&'a str, usize)>) -> Vec<Vec<usize>> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut rounds: Vec<Vec<usize>> = Vec::new();
    for (attempt, i) in writes {
        let k = seen.entry(attempt).or_insert(0);
        if *k == rounds.len() {
            rounds.push(Vec::new());
        }
        rounds[*k].push(i);
        *k += 1;
    }
    rounds
}

/// The attempt ids a statement's `RETURNING attempt_id` gave back.
fn returned(rows: &[Row]) -> HashSet<String> {
    rows.iter().map(|row| row.get::<_, String>(0)).collect()
}

/// The attempt rows of one round of intents (`Op::Intent`) or observe calls (`Op::Observe`),
/// in one statement; the attempt ids written.
async fn insert_attempts(
    client: &ClientWrapper,
    statement: &Statement,
    ops: &[Op],
    round: &[usize],
    (at, owner, lease_ms): (&String, &String, i64),
) -> Result<HashSet<String>, tokio_postgres::Error> {
    let n = round.len();
    let (mut ids, mut actions, mut sessions, mut keys) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut fingerprints, mut definitions, mut effects, mut arguments) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut phases, mut dispatches, mut statuses) = (Vec::new(), Vec::new(), Vec::new());
    let mut observing = false;
    for &i in round {
        let (intent, event) = match &ops[i] {
            Op::Intent(intent, _) => (intent, None),
            Op::Observe(intent, event, _) => (intent, Some(event)),
            _ => continue,
        };
        ids.push(intent.attempt_id.as_str());
        actions.push(intent.action.as_str());
        sessions.push(intent.session_id.as_str());
        keys.push(intent.idempotency_key.as_str());
        fingerprints.push(intent.fingerprint.as_str());
        definitions.push(intent.definition_hash.as_str());
        effects.push(intent.effect.as_str());
        arguments.push(intent.arguments.to_string());
        if let Some(event) = event {
            observing = true;
            phases.push(event.phase.as_str());
            dispatches.push(i64::from(event.dispatches));
            statuses.push(event.status.as_str());
        }
    }
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![
        &ids,
        &actions,
        &sessions,
        &keys,
        &fingerprints,
        &definitions,
        &effects,
        &arguments,
    ];
    if observing {
        params.extend([
            &phases as &(dyn ToSql + Sync),
            &dispatches,
            &statuses,
            at,
            owner,
        ]);
    } else {
        params.extend([at as &(dyn ToSql + Sync), owner, &lease_ms]);
    }
    Ok(returned(&client.query(statement, &params).await?))
}

/// One round of attempt closes (`Op::Append`), fenced by the epochs held; the attempt ids
/// closed.
async fn close_attempts(
    client: &ClientWrapper,
    statement: &Statement,
    ops: &[Op],
    round: &[usize],
    epochs: &HashMap<String, i64>,
    at: &String,
) -> Result<HashSet<String>, tokio_postgres::Error> {
    let n = round.len();
    let (mut ids, mut phases, mut statuses, mut dispatches, mut fences) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for &i in round {
        let Op::Append(event, _) = &ops[i] else {
            continue;
        };
        ids.push(event.attempt_id.as_str());
        phases.push(event.phase.as_str());
        statuses.push(event.status.as_str());
        dispatches.push(i64::from(event.dispatches));
        fences.push(epochs.get(event.attempt_id.as_str()).copied());
    }
    let rows = client
        .query(
            statement,
            &[&ids, &phases, &statuses, &dispatches, &fences, at],
        )
        .await?;
    Ok(returned(&rows))
}

/// One round of reconciler closes (`Op::Settle`); the attempt ids settled.
async fn settle_attempts(
    client: &ClientWrapper,
    statement: &Statement,
    ops: &[Op],
    round: &[usize],
    at: &String,
) -> Result<HashSet<String>, tokio_postgres::Error> {
    let n = round.len();
    let (mut ids, mut phases, mut statuses, mut dispatches) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for &i in round {
        let Op::Settle(event, _) = &ops[i] else {
            continue;
        };
        ids.push(event.attempt_id.as_str());
        phases.push(event.phase.as_str());
        statuses.push(event.status.as_str());
        dispatches.push(i64::from(event.dispatches));
    }
    let rows = client
        .query(statement, &[&ids, &phases, &statuses, &dispatches, at])
        .await?;
    Ok(returned(&rows))
}

/// The batch's dispatch notes, one per attempt with its highest request number (noting
/// `n` then `m` is noting `max(n, m)`), in one statement.
async fn note_dispatches(
    client: &ClientWrapper,
    statement: &Statement,
    notes: &[(&str, i64, Option<i64>)],
    at: &String,
) -> Result<u64, tokio_postgres::Error> {
    let ids: Vec<&str> = notes.iter().map(|n| n.0).collect();
    let ns: Vec<i64> = notes.iter().map(|n| n.1).collect();
    let fences: Vec<Option<i64>> = notes.iter().map(|n| n.2).collect();
    client.execute(statement, &[&ids, &ns, &fences, at]).await
}

/// Runs the batch as one transaction in as few flights as it allows (a flight: statements
/// sent together, their answers awaited together; the server runs them in order):
///
/// 1. `BEGIN`, the attempt rows, the dispatch notes, the closes, the reconciler's closes,
///    and the chain head locked; for a batch that appends nothing (a batch of intents),
///    `COMMIT` too: one round trip.
/// 2. The records (hashed here, on the head the first flight read), the head moved and
///    signed, and `COMMIT`.
///
/// A batch with approval changes runs them between the two, one at a time (each reads what
/// the last wrote), and locks the head after them. A statement that fails makes every later
/// one in the transaction fail and its `COMMIT` a rollback: the first error, in the order
/// the statements were sent, is the batch's.
async fn transact(
    shared: &Shared,
    client: &ClientWrapper,
    ops: &[Op],
) -> Result<Vec<Done>, PostgresError> {
    let pg = |e: tokio_postgres::Error| shared.redactor.postgres(&e);
    let st = Prepared::on(client).await.map_err(pg)?;
    let epochs = shared.epochs_snapshot(ops);
    let lease_ms = shared.lease_ms();
    let at = crate::now();
    let mut done: Vec<Done> = ops.iter().map(|_| Done::Written).collect();

    let attempt_of = |want: fn(&Op) -> Option<&str>| {
        rounds(
            ops.iter()
                .enumerate()
                .filter_map(|(i, op)| want(op).map(|attempt| (attempt, i))),
        )
    };
    let intents = attempt_of(|op| match op {
        Op::Intent(intent, _) => Some(intent.attempt_id.as_str()),
        _ => None,
    });
    let observes = attempt_of(|op| match op {
        Op::Observe(intent, ..) => Some(intent.attempt_id.as_str()),
        _ => None,
    });
    let closes = attempt_of(|op| match op {
        Op::Append(event, _) => Some(event.attempt_id.as_str()),
        _ => None,
    });
    let settles = attempt_of(|op| match op {
        Op::Settle(event, _) => Some(event.attempt_id.as_str()),
        _ => None,
    });
    let mut notes: Vec<(&str, i64, Option<i64>)> = Vec::new();
    for op in ops {
        let Op::Dispatch(attempt, n) = op else {
            continue;
        };
        match notes.iter_mut().find(|note| note.0 == attempt.as_str()) {
            Some(note) => note.1 = note.1.max(i64::from(*n)),
            None => notes.push((
                attempt.as_str(),
                i64::from(*n),
                epochs.get(attempt.as_str()).copied(),
            )),
        }
    }
    // Approval compare-and-sets, one after another (each reads what the last wrote).
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
    let may_append = ops.iter().any(|op| op.event().is_some());
    let lock_now = may_append && changes.is_empty();
    let commit_now = !may_append && changes.is_empty();
    // Nothing in a batch without a durable write is sent on the strength of its commit: a
    // server crash may lose its last few milliseconds of records (never a durable intent: a
    // synchronous commit flushes everything before it). A process crash loses nothing.
    let begin = if ops.iter().any(Op::is_durable) {
        "BEGIN"
    } else {
        "BEGIN; SET LOCAL synchronous_commit TO off"
    };
    let row_facts = (&at, &shared.owner, lease_ms);

    // Flight 1.
    let (began, intents_written, observes_written, noted, closed, settled, head, committed) = futures_util::join!(
        client.batch_execute(begin),
        join_all(intents.iter().map(|round| insert_attempts(
            client,
            &st.insert_intents,
            ops,
            round,
            row_facts
        ))),
        join_all(observes.iter().map(|round| insert_attempts(
            client,
            &st.insert_closed,
            ops,
            round,
            row_facts
        ))),
        OptionFuture::from((!notes.is_empty()).then(|| note_dispatches(
            client,
            &st.note_dispatches,
            &notes,
            &at
        ))),
        join_all(closes.iter().map(|round| close_attempts(
            client,
            &st.close_attempts,
            ops,
            round,
            &epochs,
            &at
        ))),
        join_all(settles.iter().map(|round| settle_attempts(
            client,
            &st.settle_attempts,
            ops,
            round,
            &at
        ))),
        OptionFuture::from(lock_now.then(|| client.query_one(&st.lock_head, &[]))),
        OptionFuture::from(commit_now.then(|| client.batch_execute("COMMIT"))),
    );
    began.map_err(pg)?;
    for (written, rounds) in [(intents_written, &intents), (observes_written, &observes)] {
        for (written, round) in written.into_iter().zip(rounds) {
            let written = written.map_err(pg)?;
            for &i in round {
                let (Op::Intent(intent, _) | Op::Observe(intent, ..)) = &ops[i] else {
                    continue;
                };
                if !written.contains(intent.attempt_id.as_str()) {
                    done[i] = Done::Duplicate;
                }
            }
        }
    }
    noted.transpose().map_err(pg)?;
    for (closed, round) in closed.into_iter().zip(&closes) {
        let closed = closed.map_err(pg)?;
        for &i in round {
            let Op::Append(event, _) = &ops[i] else {
                continue;
            };
            let attempt = event.attempt_id.as_str();
            // An append for an attempt this journal holds no epoch for (a refusal before
            // any intent) closes nothing and is still recorded.
            if !closed.contains(attempt) && epochs.contains_key(attempt) {
                done[i] = Done::Fenced;
            }
        }
    }
    for (settled, round) in settled.into_iter().zip(&settles) {
        let settled = settled.map_err(pg)?;
        for &i in round {
            let Op::Settle(event, _) = &ops[i] else {
                continue;
            };
            if !settled.contains(event.attempt_id.as_str()) {
                done[i] = Done::Fenced;
            }
        }
    }
    let head = head.transpose().map_err(pg)?;
    if let Some(committed) = committed {
        committed.map_err(pg)?;
        return Ok(done);
    }

    for (i, op) in changes {
        done[i] = crate::approvals::apply(shared, client, op, &epochs, lease_ms, &at)
            .await
            .map_err(|e| e.into_postgres(shared))?;
    }

    // Flight 2: the chain.
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
    if appending.is_empty() {
        client.batch_execute("COMMIT").await.map_err(pg)?;
        return Ok(done);
    }
    let head = match head {
        Some(head) => head,
        None => client.query_one(&st.lock_head, &[]).await.map_err(pg)?,
    };
    let mut seq: i64 = head.get(0);
    let mut hash: String = head.get(1);
    let mut records = Vec::with_capacity(appending.len());
    let mut jsons = Vec::with_capacity(appending.len());
    for &i in &appending {
        let Some(event) = ops[i].event() else {
            continue;
        };
        let json = serde_json::to_string(event)
            .map_err(|e| PostgresError::own(format!("cannot serialize an audit event: {e}")))?;
        seq += 1;
        let next = chain_hash(&hash, seq.cast_unsigned(), &json);
        jsons.push(json);
        records.push((
            i,
            AuditRecord {
                seq: seq.cast_unsigned(),
                prev_hash: std::mem::replace(&mut hash, next.clone()),
                hash: next,
                event: event.clone(),
            },
        ));
    }
    let seqs: Vec<i64> = records.iter().map(|(_, r)| r.seq.cast_signed()).collect();
    let receipts: Vec<&str> = records
        .iter()
        .map(|(_, r)| r.event.receipt_id.as_str())
        .collect();
    let attempts: Vec<&str> = records
        .iter()
        .map(|(_, r)| r.event.attempt_id.as_str())
        .collect();
    let prev_hashes: Vec<&str> = records.iter().map(|(_, r)| r.prev_hash.as_str()).collect();
    let hashes: Vec<&str> = records.iter().map(|(_, r)| r.hash.as_str()).collect();
    let signed = shared.signing_key.as_ref().map(|key| {
        key.sign(
            &ChainHead {
                count: seq.cast_unsigned(),
                hash: hash.clone(),
            },
            at.clone(),
        )
    });
    let record_params: [&(dyn ToSql + Sync); 6] =
        [&seqs, &receipts, &attempts, &prev_hashes, &hashes, &jsons];
    let head_params: [&(dyn ToSql + Sync); 2] = [&seq, &hash];
    let signed_params: Option<[&(dyn ToSql + Sync); 5]> = signed.as_ref().map(|signed| {
        [
            &seq as &(dyn ToSql + Sync),
            &signed.hash,
            &signed.key_id,
            &signed.signature,
            &signed.signed_at,
        ]
    });
    let (inserted, moved, signed, committed) = futures_util::join!(
        client.execute(&st.insert_records, &record_params),
        client.execute(&st.set_head, &head_params),
        OptionFuture::from(
            signed_params
                .as_ref()
                .map(|params| client.execute(&st.insert_signed_head, params))
        ),
        client.batch_execute("COMMIT"),
    );
    inserted.map_err(pg)?;
    moved.map_err(pg)?;
    signed.transpose().map_err(pg)?;
    committed.map_err(pg)?;
    for (i, record) in records {
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
