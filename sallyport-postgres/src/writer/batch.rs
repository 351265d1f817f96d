//! The two-flight batch: `BEGIN`, the attempt rows, the dispatch notes, the closes and the
//! chain-head lock in one flight; the compare-and-sets one by one; then the records, the
//! head and `COMMIT` (or a batch that appends nothing, committed in the first flight).

use std::collections::HashMap;

use deadpool_postgres::Client;
use futures_util::future::join_all;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};

use super::chain::{Chained, Tail, chain};
use super::ops::{self, Done};
use super::single_flight::{Batch, single_flight};
use crate::error::PostgresError;
use crate::shared::Shared;
use crate::sql;
use sallyport_core::journal::batch::{ApprovalWrite, Write};

/// The batch's operations that write an attempt row (intents and observe calls), with
/// their places in the batch, in the order of their idempotency keys.
fn in_key_order(ops: &[Write]) -> impl Iterator<Item = (usize, &Write)> {
    let mut rows: Vec<(usize, &Write, &str)> = ops
        .iter()
        .enumerate()
        .filter_map(|(i, op)| match op {
            Write::Intent(intent, _) | Write::Observe(intent, ..) => {
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
    ops: &[Write],
) -> Result<Vec<Done>, PostgresError> {
    let epochs = shared.epochs_snapshot(ops);
    let lease_ms = shared.lease_ms();
    let at = sallyport_core::clock::now();
    let one_at_a_time = ops
        .iter()
        .any(|op| matches!(op, Write::Approval(_) | Write::SettleUnresolved(..)));
    let may_append = ops.iter().any(|op| op.event().is_some());
    let closed_here = closed_here(ops);
    let batch = Batch {
        ops,
        begin: begin(shared, ops),
        closed_here: &closed_here,
        epochs: &epochs,
        at: &at,
    };

    // Closes and their records, with the head this journal last wrote: one flight.
    let closes_only = ops
        .iter()
        .all(|op| matches!(op, Write::Append(..) | Write::Dispatch(..)));
    if may_append
        && closes_only
        && let Some(head) = shared.cached_head()
        && let Some(done) = single_flight(shared, client, &batch, head).await?
    {
        return Ok(done);
    }

    TwoFlights {
        shared,
        client,
        batch: &batch,
        lease_ms,
        one_at_a_time,
        may_append,
    }
    .apply()
    .await
}

/// Attempts the batch closes → the highest request number noted for each. A dispatch note
/// for an attempt that the same batch closes says nothing the close does not: the close
/// takes the highest request number of both, and is fenced the same way.
fn closed_here(ops: &[Write]) -> HashMap<&str, u32> {
    let mut closed_here: HashMap<&str, u32> = HashMap::new();
    for op in ops {
        if let Write::Append(event, _) = op {
            closed_here.insert(event.attempt_id.as_str(), event.dispatches);
        }
    }
    for op in ops {
        if let Write::Dispatch(attempt, n) = op
            && let Some(dispatches) = closed_here.get_mut(attempt.as_str())
        {
            *dispatches = (*dispatches).max(*n);
        }
    }
    closed_here
}

/// How the batch's transaction begins. A batch with an intent, an approval change or a record
/// someone waits for (its receipt goes to the agent) commits synchronously; one of only
/// dispatch notes and detached records commits without waiting for the flush: a server
/// crash may lose its last few milliseconds (which the next synchronous commit would have
/// flushed), a process crash loses nothing.
fn begin<'a>(shared: &'a Shared, ops: &[Write]) -> &'a str {
    shared.begin(ops.iter().any(ops::is_durable))
}

/// A statement the batch needs, prepared (once per connection: cached after that).
async fn prepare_if(
    client: &Client,
    needed: bool,
    sql: &'static str,
) -> Result<Option<Statement>, tokio_postgres::Error> {
    if needed {
        client.prepare_cached(sql).await.map(Some)
    } else {
        Ok(None)
    }
}

/// The statements of flight 1 the batch needs, each `None` when no operation uses it.
struct FirstStatements {
    insert_intent: Option<Statement>,
    insert_closed: Option<Statement>,
    note: Option<Statement>,
    close: Option<Statement>,
    lock_head: Option<Statement>,
}

/// Where flight 1 left the batch.
enum AfterFirst {
    /// Its `COMMIT` went in flight 1: it is written, and there is nothing more to send.
    Committed,
    /// Still open, with the chain head when flight 1 locked it.
    Open(Option<Row>),
}

/// A batch sent in two flights, and what each step of it reads.
struct TwoFlights<'a> {
    shared: &'a Shared,
    client: &'a Client,
    /// The operations and what both paths read of them.
    batch: &'a Batch<'a>,
    lease_ms: i64,
    /// The batch holds a compare-and-set (an approval or a reconciler's close): those run
    /// one at a time between the flights, and the head is locked after them.
    one_at_a_time: bool,
    /// Some operation appends a record.
    may_append: bool,
}

impl TwoFlights<'_> {
    /// Maps a PostgreSQL error to this journal's, redacted.
    fn pg(&self) -> impl Fn(tokio_postgres::Error) -> PostgresError + '_ {
        |e| self.shared.redactor.postgres(&e)
    }

    /// Flight 1, the compare-and-sets one at a time, then flight 2: each operation's outcome.
    async fn apply(&self) -> Result<Vec<Done>, PostgresError> {
        let mut done: Vec<Done> = self.batch.ops.iter().map(|_| Done::Written).collect();
        let statements = self.prepare_first().await?;
        let mut head = match self.first_flight(&statements, &mut done).await? {
            AfterFirst::Committed => return Ok(done),
            AfterFirst::Open(head) => head,
        };
        if self.one_at_a_time {
            self.settle(&mut done).await?;
            self.change_approvals(&mut done).await?;
            // The chain lock last, so that it is held for the inserts and the commit only.
            if let Some(lock) = &statements.lock_head {
                head = Some(
                    self.client
                        .query_one(lock, &[&self.shared.shard])
                        .await
                        .map_err(self.pg())?,
                );
            }
        }
        self.second_flight(head, &mut done).await?;
        Ok(done)
    }

    /// Prepares the statements flight 1 needs, and only those.
    async fn prepare_first(&self) -> Result<FirstStatements, PostgresError> {
        let (client, pg) = (self.client, self.pg());
        let has = |f: fn(&Write) -> bool| self.batch.ops.iter().any(f);
        let insert_intent = prepare_if(
            client,
            has(|op| matches!(op, Write::Intent(..))),
            sql::INSERT_INTENT,
        )
        .await
        .map_err(&pg)?;
        let insert_closed = prepare_if(
            client,
            has(|op| matches!(op, Write::Observe(..))),
            sql::INSERT_CLOSED,
        )
        .await
        .map_err(&pg)?;
        let note = prepare_if(
            client,
            has(|op| matches!(op, Write::Dispatch(..))),
            sql::NOTE_DISPATCH,
        )
        .await
        .map_err(&pg)?;
        let close = prepare_if(
            client,
            has(|op| matches!(op, Write::Append(..))),
            sql::CLOSE_ATTEMPT,
        )
        .await
        .map_err(&pg)?;
        let lock_head = prepare_if(client, self.may_append, sql::LOCK_HEAD)
            .await
            .map_err(&pg)?;
        Ok(FirstStatements {
            insert_intent,
            insert_closed,
            note,
            close,
            lock_head,
        })
    }

    /// Flight 1: `BEGIN`, the attempt rows, the dispatch notes, the closes and the head lock
    /// (or, for a batch that appends nothing and has no compare-and-set, `COMMIT`), each
    /// sent without waiting for the one before; a taken key or a fenced close is noted in
    /// `done`.
    async fn first_flight(
        &self,
        statements: &FirstStatements,
        done: &mut [Done],
    ) -> Result<AfterFirst, PostgresError> {
        let (client, pg) = (self.client, self.pg());
        let head = async {
            match &statements.lock_head {
                Some(lock) if !self.one_at_a_time => {
                    Some(client.query_one(lock, &[&self.shared.shard]).await)
                }
                _ => None,
            }
        };
        // A batch that appends nothing and has no compare-and-set to read back (intents,
        // dispatch notes) needs no answer before its end: its `COMMIT` goes in the same
        // flight. Nothing in it can fail quietly: a taken key or a fenced close is a row not
        // returned, and an error aborts the transaction, so the `COMMIT` behind it rolls back.
        let commit_now = !self.may_append && !self.one_at_a_time;
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
            client.batch_execute(self.batch.begin),
            join_all(self.attempt_rows(statements)),
            join_all(self.notes(statements)),
            join_all(self.closes(statements)),
            head,
            early_commit,
        );
        began.map_err(&pg)?;
        for (i, result) in rows {
            if result.map_err(&pg)?.is_empty() {
                done[i] = Done::Duplicate;
            }
        }
        for result in notes {
            result.map_err(&pg)?;
        }
        for (i, fenced_if_missing, result) in closes {
            if result.map_err(&pg)?.is_empty() && fenced_if_missing {
                done[i] = Done::Fenced;
            }
        }
        let head = head.transpose().map_err(&pg)?;
        if let Some(committed) = early_commit {
            committed.map_err(&pg)?;
            return Ok(AfterFirst::Committed);
        }
        Ok(AfterFirst::Open(head))
    }

    /// Flight 1's attempt rows (intents, and observe calls' closed rows), each answering with
    /// its place in the batch and the rows it returned (none: the key is taken). They go in
    /// idempotency-key order: the two intent writers' batches may hold the same keys (a key
    /// reused by calls in flight at once), and each insert waits on a key the other's open
    /// transaction holds. Taken in one order, the second batch waits for the first to
    /// commit; taken in opposite orders, they would deadlock until PostgreSQL aborted one
    /// (after `deadlock_timeout`) and refused its calls.
    fn attempt_rows<'s>(
        &'s self,
        statements: &'s FirstStatements,
    ) -> impl Iterator<Item = impl Future<Output = (usize, Result<Vec<Row>, tokio_postgres::Error>)>>
    {
        let (client, lease_ms) = (self.client, self.lease_ms);
        in_key_order(self.batch.ops).filter_map(move |(i, op)| {
            let (statement, intent, event) = match op {
                Write::Intent(intent, _) => (statements.insert_intent.as_ref()?, intent, None),
                Write::Observe(intent, event, _) => {
                    (statements.insert_closed.as_ref()?, intent, Some(event))
                }
                _ => return None,
            };
            let (at, owner) = (self.batch.at, &self.shared.owner);
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
        })
    }

    /// Flight 1's dispatch notes, but for attempts the batch closes (the close takes the
    /// note's request number).
    fn notes<'s>(
        &'s self,
        statements: &'s FirstStatements,
    ) -> impl Iterator<Item = impl Future<Output = Result<u64, tokio_postgres::Error>>> {
        let client = self.client;
        self.batch.ops.iter().filter_map(move |op| {
            let Write::Dispatch(attempt, n) = op else {
                return None;
            };
            if self.batch.closed_here.contains_key(attempt.as_str()) {
                return None;
            }
            let (note, epoch, at) = (
                statements.note.as_ref()?,
                self.batch.epochs.get(attempt.as_str()).copied(),
                self.batch.at,
            );
            Some(async move {
                client
                    .execute(note, &[&attempt.as_str(), &i64::from(*n), at, &epoch])
                    .await
            })
        })
    }

    /// Flight 1's attempt closes, fenced by the epoch this journal holds: each answers with
    /// its place in the batch, whether a missing row means it was fenced (it had an epoch),
    /// and the rows it returned.
    fn closes<'s>(
        &'s self,
        statements: &'s FirstStatements,
    ) -> impl Iterator<Item = impl Future<Output = (usize, bool, Result<Vec<Row>, tokio_postgres::Error>)>>
    {
        let client = self.client;
        self.batch
            .ops
            .iter()
            .enumerate()
            .filter_map(move |(i, op)| {
                let Write::Append(event, _) = op else {
                    return None;
                };
                let close = statements.close.as_ref()?;
                let attempt = event.attempt_id.as_str();
                let epoch = self.batch.epochs.get(attempt).copied();
                let dispatches = self
                    .batch
                    .closed_here
                    .get(attempt)
                    .copied()
                    .unwrap_or(event.dispatches);
                let at = self.batch.at;
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
            })
    }

    /// The reconciler's closes: one statement at a time, each a compare-and-set; one that
    /// finds its attempt already closed is fenced.
    async fn settle(&self, done: &mut [Done]) -> Result<(), PostgresError> {
        let pg = self.pg();
        let settle = self
            .client
            .prepare_cached(sql::SETTLE_ATTEMPT)
            .await
            .map_err(&pg)?;
        for (i, op) in self.batch.ops.iter().enumerate() {
            let Write::SettleUnresolved(_, event, _) = op else {
                continue;
            };
            let rows = self
                .client
                .query(
                    &settle,
                    &[
                        &event.attempt_id.as_str(),
                        &event.phase.as_str(),
                        &event.status.as_str(),
                        &i64::from(event.dispatches),
                        self.batch.at,
                    ],
                )
                .await
                .map_err(&pg)?;
            if rows.is_empty() {
                done[i] = Done::Fenced;
            }
        }
        Ok(())
    }

    /// Approval compare-and-sets, one after another (each reads what the last wrote). Rows
    /// are locked in approval-id order, so two processes' batches never wait on each other
    /// in a cycle; changes to one approval keep the order they were made in.
    async fn change_approvals(&self, done: &mut [Done]) -> Result<(), PostgresError> {
        let mut changes: Vec<(usize, &ApprovalWrite)> = self
            .batch
            .ops
            .iter()
            .enumerate()
            .filter_map(|(i, op)| match op {
                Write::Approval(change) => Some((i, change.as_ref())),
                _ => None,
            })
            .collect();
        changes.sort_by(|a, b| a.1.approval_id().as_str().cmp(b.1.approval_id().as_str()));
        let (shared, batch) = (self.shared, self.batch);
        for (i, op) in changes {
            done[i] = crate::approvals::apply(
                shared,
                self.client,
                op,
                batch.epochs,
                self.lease_ms,
                batch.at,
            )
            .await
            .map_err(|e| e.into_postgres(shared))?;
        }
        Ok(())
    }

    /// Flight 2: the records chained on `head`, the head moved and signed, and `COMMIT`;
    /// then the head is kept and each appending operation is given its record.
    async fn second_flight(
        &self,
        head: Option<Row>,
        done: &mut [Done],
    ) -> Result<(), PostgresError> {
        let (shared, client, pg) = (self.shared, self.client, self.pg());
        let ops = self.batch.ops;
        let appending = appending(ops, done);
        let (records, chain_end) = match head.filter(|_| !appending.is_empty()) {
            Some(head) => chain(&shared.shard, ops, &appending, head.get(0), head.get(1))?,
            None => (Vec::new(), None),
        };
        let tail = Tail::prepare(shared, client, &records, chain_end, self.batch.at).await?;
        let set_head = prepare_if(client, tail.chain_end.is_some(), sql::SET_HEAD)
            .await
            .map_err(&pg)?;
        let moved = async {
            match (&set_head, &tail.chain_end) {
                (Some(set), Some((seq, hash))) => {
                    Some(client.execute(set, &[seq, hash, &shared.shard]).await)
                }
                _ => None,
            }
        };
        let (inserted, moved, signed_row, committed) = futures_util::join!(
            tail.insert_records(client, &records),
            moved,
            tail.insert_signed(client),
            client.batch_execute("COMMIT"),
        );
        inserted.map_err(&pg)?;
        moved.transpose().map_err(&pg)?;
        signed_row.map_err(&pg)?;
        committed.map_err(&pg)?;
        if let Some((seq, hash)) = tail.chain_end {
            shared.keep_head(seq, hash);
        }
        give_records(done, records);
        Ok(())
    }
}

/// The places of the operations whose records the batch appends: those with an event that
/// were written (an approval change only when its compare-and-set appends).
fn appending(ops: &[Write], done: &[Done]) -> Vec<usize> {
    ops.iter()
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
        .collect()
}

/// Gives each appending operation its committed record (an approval change keeps its
/// transition beside it).
fn give_records(done: &mut [Done], records: Vec<Chained>) {
    for (i, _, record) in records {
        done[i] = match std::mem::replace(&mut done[i], Done::Written) {
            Done::Transition(t, _) => Done::TransitionRecord(t, Box::new(record)),
            _ => Done::Record(Box::new(record)),
        };
    }
}
