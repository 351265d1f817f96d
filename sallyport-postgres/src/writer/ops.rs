//! What each queued write ([`Write`], the queue both batching journals share) came to, and
//! the answer each gets once its batch is committed (or has failed).

use std::collections::HashMap;

use sallyport_core::approval::Transition;
use sallyport_core::journal::batch::{Answer, ApprovalWrite, Write};
use sallyport_core::journal::{AuditRecord, JournalError};

use crate::error::PostgresError;
use crate::shared::Shared;

/// Whether the batch holding `op` must commit synchronously.
pub(super) fn is_durable(op: &Write) -> bool {
    // Approval changes are decisions someone will act on, and a record someone waits for is
    // one whose receipt the agent is handed: both are on the server's disk before the writer
    // answers, so a crash of the server loses no receipt anyone was given. Only what nobody
    // waits for (a dispatch note, a detached record) may commit without the flush.
    matches!(
        op,
        Write::Approval(_)
            | Write::Append(_, Some(_))
            | Write::Observe(..)
            | Write::SettleUnresolved(..)
    ) || op.has_durable_intent()
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

/// Sends each write its outcome once the batch is committed (or failed), and keeps the
/// epochs of attempts this journal now holds.
///
/// A failed batch leaves nothing stuck. A record its caller waits for keeps its attempt
/// held: the caller (the executor keeps the record) writes it again or gives the attempt
/// up ([`sallyport_core::journal::Journal::release_lease`]). A detached record (a cancelled
/// call's), one whose caller stopped waiting, and a reconciler's close have nobody to write
/// them again, so their attempt is released at once: the heartbeat
/// stops renewing it and a reconciler settles it when its lease runs out. A dispatch note is
/// kept for the next batch while its attempt is held.
pub(super) fn answer(shared: &Shared, ops: Vec<Write>, outcome: Result<Vec<Done>, PostgresError>) {
    let intents: Vec<String> = ops
        .iter()
        .filter_map(|op| match op {
            Write::Intent(intent, _) => Some(intent.attempt_id.as_str().to_owned()),
            _ => None,
        })
        .collect();
    let done = match outcome {
        Ok(done) => done,
        Err(e) => {
            shared.intents_answered(intents.iter().map(String::as_str));
            for op in ops {
                match &op {
                    // Nobody will write these again: a detached record, one whose caller
                    // stopped waiting, a reconciler's close (it runs again and claims anew).
                    Write::Append(event, None) | Write::SettleUnresolved(_, event, _) => {
                        shared.release(event.attempt_id.as_str());
                    }
                    Write::Append(event, Some(reply)) if reply.is_closed() => {
                        shared.release(event.attempt_id.as_str());
                    }
                    Write::Dispatch(attempt, n) => shared.keep_unnoted(attempt.as_str(), *n),
                    _ => {}
                }
                op.fail(&|| JournalError::Write(Box::new(e.clone())), &e);
            }
            return;
        }
    };
    let mut held: HashMap<String, Option<i64>> = HashMap::new();
    // Answered once the epochs are kept: the call's next write goes to the other writer,
    // which must find the epoch to fence it by.
    let mut written = Vec::new();
    for (op, done) in ops.into_iter().zip(done) {
        let answer = match (&op, done) {
            (Write::Intent(intent, _), Done::Written) => {
                held.insert(intent.attempt_id.as_str().to_owned(), Some(1));
                written.push(op);
                continue;
            }
            (Write::Intent(..), _) => Answer::Done(Err(JournalError::DuplicateKey)),
            (Write::Observe(..), Done::Record(record)) => Answer::Record(Ok(*record)),
            (Write::Observe(..), _) => Answer::Record(Err(JournalError::DuplicateKey)),
            (Write::Append(event, _), done) => {
                held.insert(event.attempt_id.as_str().to_owned(), None);
                Answer::Record(match done {
                    Done::Record(record) => Ok(*record),
                    _ => Err(JournalError::Fenced),
                })
            }
            (Write::Approval(change), done) => approval_answer(change, done, &mut held),
            (Write::SettleUnresolved(_, event, _), done) => {
                held.insert(event.attempt_id.as_str().to_owned(), None);
                Answer::Settled(Ok(matches!(done, Done::Record(_))))
            }
            (Write::Dispatch(..), _) => Answer::Done(Ok(())),
        };
        op.answer(answer);
    }
    shared.update_epochs(held);
    shared.intents_answered(intents.iter().map(String::as_str));
    for op in written {
        op.answer(Answer::<AuditRecord>::Done(Ok(())));
    }
}

/// What an approval change's caller is told once its batch committed; notes the epochs of
/// attempts begun or closed.
fn approval_answer(
    change: &ApprovalWrite,
    done: Done,
    held: &mut HashMap<String, Option<i64>>,
) -> Answer<AuditRecord> {
    let unexpected = || {
        JournalError::Write(Box::new(PostgresError::own(
            "the approval change ended in an unexpected state",
        )))
    };
    match change {
        ApprovalWrite::Park(..) => Answer::Record(match done {
            Done::TransitionRecord(_, record) => Ok(*record),
            Done::Duplicate => Err(JournalError::DuplicateKey),
            _ => Err(unexpected()),
        }),
        ApprovalWrite::Decide(..) | ApprovalWrite::Expire(..) | ApprovalWrite::Claim(..) => {
            Answer::Transition(Box::new(match done {
                Done::TransitionRecord(t, _) | Done::Transition(t, _) => Ok(*t),
                _ => Err(unexpected()),
            }))
        }
        ApprovalWrite::Begin(_, _, intent, _) => Answer::Done(match done {
            Done::Written => {
                held.insert(intent.attempt_id.as_str().to_owned(), Some(1));
                Ok(())
            }
            Done::Duplicate => Err(JournalError::DuplicateKey),
            Done::Fenced => Err(JournalError::Fenced),
            _ => Err(unexpected()),
        }),
        ApprovalWrite::Settle(_, _, _, event, _) => Answer::Record(match done {
            Done::TransitionRecord(_, record) => {
                held.insert(event.attempt_id.as_str().to_owned(), None);
                Ok(*record)
            }
            Done::Fenced => Err(JournalError::Fenced),
            _ => Err(unexpected()),
        }),
    }
}
