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

mod batch;
mod chain;
mod ops;
mod single_flight;

use std::sync::Arc;

use tokio::sync::{Mutex, mpsc};

pub(crate) use self::chain::ChainEnd;
pub(crate) use self::ops::Done;
use crate::error::PostgresError;
use crate::shared::Shared;
use sallyport_core::journal::batch::Write;

/// Most operations applied in one transaction.
pub const MAX_BATCH: usize = 512;

/// A writer task: batches until the journal is dropped (its queue then closes) and every
/// queued write has been applied. Several writers may share one queue: each takes what is
/// queued when it gets the queue, and lets go of it while its batch commits, so the next
/// writer's batch can be on its way while this one waits for its flush.
pub(crate) async fn run(shared: Arc<Shared>, queue: Arc<Mutex<mpsc::UnboundedReceiver<Write>>>) {
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
        // The record writer's batch also carries the dispatch notes a failed batch left
        // (the intent writers' batches hold intents only).
        let ops = if matches!(ops.first(), Some(Write::Intent(..))) {
            ops
        } else {
            let mut with_notes = shared.take_unnoted();
            with_notes.extend(ops);
            with_notes
        };
        shared.after_their_intents(&ops).await;
        let outcome = write_batch(&shared, &ops).await;
        ops::answer(&shared, ops, outcome);
    }
}

/// One transaction for the batch; every write's outcome, or the failure that undid them all.
async fn write_batch(shared: &Shared, ops: &[Write]) -> Result<Vec<Done>, PostgresError> {
    let client = shared
        .pool
        .get()
        .await
        .map_err(|e| shared.redactor.other(&e))?;
    let outcome = batch::apply_batch(shared, &client, ops).await;
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
