//! The queued writes, what each came to, and the answer each gets once its batch is
//! committed (or has failed).

use std::collections::HashMap;

use sallyport_core::approval::Transition;
use sallyport_core::journal::{AttemptId, AuditEvent, AuditRecord, Intent, JournalError};
use tokio::sync::oneshot;

use crate::approvals::ApprovalOp;
use crate::error::PostgresError;
use crate::shared::Shared;

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
    pub(super) fn is_durable(&self) -> bool {
        // Approval changes are decisions someone will act on: always committed durably.
        matches!(self, Self::Intent(intent, _) | Self::Observe(intent, ..) if intent.durable)
            || matches!(self, Self::Approval(_))
    }

    /// The audit event this operation appends, if it appends one.
    pub(super) fn event(&self) -> Option<&AuditEvent> {
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

/// Sends each write its outcome once the batch is committed (or failed), and keeps the
/// epochs of attempts this journal now holds.
pub(super) fn answer(shared: &Shared, ops: Vec<Op>, outcome: Result<Vec<Done>, PostgresError>) {
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
