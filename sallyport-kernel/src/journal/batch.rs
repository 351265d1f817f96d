//! The write queue of the batching journals: the writes callers queue, the answer each gets
//! once the batch holding it is committed (or has failed), and how it is sent. The SQLite
//! and PostgreSQL journals both queue [`Write`]s and apply them in batches, one transaction
//! each (group commit); how a batch is taken from the queue and written is each backend's
//! own, what is queued and how it is answered is here, once.
//!
//! Backend plumbing, public for the backend crates; not part of the stable API.

use std::error::Error;
use std::fmt;

use tokio::sync::oneshot;

use super::{AttemptId, AuditEvent, AuditRecord, Intent, JournalError};
use crate::outcome::ActionResult;
use sallyport_vocab::approval::{Approval, ApprovalDecision, ApprovalId, Claim, Transition};

/// Where a queued write's answer goes.
pub type Reply<T> = oneshot::Sender<Result<T, JournalError>>;

/// What a claim on an approval asks for.
#[derive(Debug)]
pub struct ClaimRequest {
    /// The approval.
    pub id: ApprovalId,
    /// The executor instance claiming it.
    pub owner: String,
    /// The time the claim is made at (Unix milliseconds).
    pub now_ms: u64,
    /// How long the claim holds.
    pub lease_ms: u64,
}

/// A queued change to the approval store. Each is decided by the transition rule of
/// [`Approval`] the backend applies to the row it loaded in the batch's transaction.
#[derive(Debug)]
pub enum ApprovalWrite {
    /// A new approval ([`Approval::park`]) and the parked call's record.
    Park(Box<Approval>, Box<AuditEvent>, Reply<AuditRecord>),
    /// A decision ([`Approval::decide`]), recorded if it applies.
    Decide(
        ApprovalId,
        Box<ApprovalDecision>,
        Box<AuditEvent>,
        Reply<Transition>,
    ),
    /// An expiry at the given time ([`Approval::expire`]), recorded if it applies.
    Expire(ApprovalId, u64, Box<AuditEvent>, Reply<Transition>),
    /// A claim ([`Approval::take_claim`]; not audited).
    Claim(Box<ClaimRequest>, Reply<Transition>),
    /// An approved call's intent, written under its claim ([`Approval::begin_execution`]).
    Begin(ApprovalId, Box<Claim>, Box<Intent>, Reply<()>),
    /// An approved call's end, stored under its claim ([`Approval::settle`]) with its record.
    Settle(
        ApprovalId,
        Box<Claim>,
        Box<ActionResult>,
        Box<AuditEvent>,
        Reply<AuditRecord>,
    ),
}

impl ApprovalWrite {
    /// The approval this change is to.
    pub fn approval_id(&self) -> &ApprovalId {
        match self {
            Self::Park(approval, ..) => &approval.approval_id,
            Self::Claim(request, _) => &request.id,
            Self::Decide(id, ..)
            | Self::Expire(id, ..)
            | Self::Begin(id, ..)
            | Self::Settle(id, ..) => id,
        }
    }

    /// The event the change appends when it applies.
    pub fn event(&self) -> Option<&AuditEvent> {
        match self {
            Self::Park(_, event, _)
            | Self::Decide(_, _, event, _)
            | Self::Expire(_, _, event, _)
            | Self::Settle(_, _, _, event, _) => Some(event),
            Self::Claim(..) | Self::Begin(..) => None,
        }
    }
}

/// One queued write.
#[derive(Debug)]
pub enum Write {
    /// An intent to write.
    Intent(Box<Intent>, Reply<()>),
    /// A dispatch to note (nobody waits).
    Dispatch(AttemptId, u32),
    /// A record to append; no reply for a detached append.
    Append(Box<AuditEvent>, Option<Reply<AuditRecord>>),
    /// An observe call's closed attempt row and its record, written together.
    Observe(Box<Intent>, Box<AuditEvent>, Reply<AuditRecord>),
    /// A change to the approval store.
    Approval(Box<ApprovalWrite>),
    /// A reconciler's record for the attempt, appended only while no record closes it.
    SettleUnresolved(AttemptId, Box<AuditEvent>, Reply<bool>),
}

impl Write {
    /// The audit event this write appends, if it may append one.
    pub fn event(&self) -> Option<&AuditEvent> {
        match self {
            Self::Append(event, _)
            | Self::Observe(_, event, _)
            | Self::SettleUnresolved(_, event, _) => Some(event),
            Self::Approval(change) => change.event(),
            Self::Intent(..) | Self::Dispatch(..) => None,
        }
    }

    /// Whether the write may extend the chain.
    pub fn appends(&self) -> bool {
        self.event().is_some()
    }

    /// The intent the write stores, if any (an approved call's `Begin` stores one too).
    pub fn intent(&self) -> Option<&Intent> {
        match self {
            Self::Intent(intent, _) | Self::Observe(intent, ..) => Some(intent),
            Self::Approval(change) => match &**change {
                ApprovalWrite::Begin(_, _, intent, _) => Some(intent),
                _ => None,
            },
            Self::Dispatch(..) | Self::Append(..) | Self::SettleUnresolved(..) => None,
        }
    }

    /// Whether the write stores an intent that must be durable before it is answered.
    pub fn has_durable_intent(&self) -> bool {
        self.intent().is_some_and(|intent| intent.durable)
    }

    /// A call's last record, with its caller waiting for it.
    pub fn is_call_record(&self) -> bool {
        matches!(self, Self::Observe(..) | Self::Append(_, Some(_)))
    }

    /// Sends the write its answer, once its batch is committed. A record answer is made
    /// into the record with the write's own event ([`Chained::into_record`]). A detached
    /// append or a dispatch note that failed has nobody to answer, and is logged. An answer
    /// of the wrong kind (a backend's bug) drops the reply: its caller is told the writer
    /// stopped, never that the write succeeded.
    pub fn answer<R: Chained>(self, answer: Answer<R>) {
        match (self, answer) {
            (Self::Intent(_, reply), Answer::Done(r)) => {
                let _ = reply.send(r);
            }
            (Self::Dispatch(attempt, _), Answer::Done(Err(e))) => {
                tracing::warn!(attempt = %attempt, error = %Chain(&e), "dispatch note not written");
            }
            (Self::Append(event, None), Answer::Record(Err(e))) => {
                tracing::error!(attempt = %event.attempt_id, error = %Chain(&e), "detached audit append failed");
            }
            (
                Self::Append(event, Some(reply)) | Self::Observe(_, event, reply),
                Answer::Record(r),
            ) => {
                let _ = reply.send(r.map(|place| place.into_record(*event)));
            }
            (Self::SettleUnresolved(_, _, reply), Answer::Settled(r)) => {
                let _ = reply.send(r);
            }
            (Self::Approval(change), answer) => match (*change, answer) {
                (
                    ApprovalWrite::Park(_, event, reply)
                    | ApprovalWrite::Settle(_, _, _, event, reply),
                    Answer::Record(r),
                ) => {
                    let _ = reply.send(r.map(|place| place.into_record(*event)));
                }
                (
                    ApprovalWrite::Decide(.., reply)
                    | ApprovalWrite::Expire(.., reply)
                    | ApprovalWrite::Claim(_, reply),
                    Answer::Transition(r),
                ) => {
                    let _ = reply.send(*r);
                }
                (ApprovalWrite::Begin(.., reply), Answer::Done(r)) => {
                    let _ = reply.send(r);
                }
                _ => {}
            },
            _ => {}
        }
    }

    /// Answers a write whose batch failed with `error` (made once per waiting caller);
    /// `cause` is what is logged for the writes nobody waits for.
    pub fn fail(self, error: &dyn Fn() -> JournalError, cause: &dyn fmt::Display) {
        match self {
            Self::Intent(_, reply) => {
                let _ = reply.send(Err(error()));
            }
            Self::Observe(_, _, reply) | Self::Append(_, Some(reply)) => {
                let _ = reply.send(Err(error()));
            }
            Self::SettleUnresolved(_, _, reply) => {
                let _ = reply.send(Err(error()));
            }
            Self::Append(event, None) => {
                tracing::error!(attempt = %event.attempt_id, error = %cause, "detached audit append failed");
            }
            Self::Dispatch(attempt, _) => {
                tracing::warn!(attempt = %attempt, error = %cause, "dispatch note not written");
            }
            Self::Approval(change) => match *change {
                ApprovalWrite::Park(.., reply) | ApprovalWrite::Settle(.., reply) => {
                    let _ = reply.send(Err(error()));
                }
                ApprovalWrite::Decide(.., reply)
                | ApprovalWrite::Expire(.., reply)
                | ApprovalWrite::Claim(_, reply) => {
                    let _ = reply.send(Err(error()));
                }
                ApprovalWrite::Begin(.., reply) => {
                    let _ = reply.send(Err(error()));
                }
            },
        }
    }
}

/// What a write came to, sent to its caller by [`Write::answer`]. `R` is how the backend
/// holds an appended record until then ([`Chained`]).
#[derive(Debug)]
pub enum Answer<R> {
    /// An intent (or an approved call's intent), or a dispatch note.
    Done(Result<(), JournalError>),
    /// An appended record: an append, an observe call, a parked or settled approval.
    Record(Result<R, JournalError>),
    /// A decision, an expiry or a claim: applied, unchanged, or not found (boxed: a
    /// transition holds a whole approval).
    Transition(Box<Result<Transition, JournalError>>),
    /// A reconciler's record: whether it was appended.
    Settled(Result<bool, JournalError>),
}

/// How a backend holds a record it appended until the write is answered: the record itself,
/// or its place in the chain, made into the record with the write's event (which the
/// write owns, so it is moved into the record rather than copied).
pub trait Chained {
    /// The record, with `event` the write's own.
    fn into_record(self, event: AuditEvent) -> AuditRecord;
}

impl Chained for AuditRecord {
    /// The record already holds its event.
    fn into_record(self, _event: AuditEvent) -> AuditRecord {
        self
    }
}

/// An error with its sources, for a log line (`journal write failed: disk I/O error`).
struct Chain<'a>(&'a JournalError);

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(e) = source {
            write!(f, ": {e}")?;
            source = e.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(intent: &Intent) -> AuditEvent {
        AuditEvent::for_bench(intent)
    }

    fn record(seq: u64, event: AuditEvent) -> AuditRecord {
        AuditRecord {
            shard: crate::journal::checkpoint::DEFAULT_SHARD.to_owned(),
            seq,
            prev_hash: "p".repeat(64),
            hash: "h".repeat(64),
            event,
        }
    }

    /// A record's place in the chain, as a backend may hold it until the answer.
    struct Place(u64);

    impl Chained for Place {
        fn into_record(self, event: AuditEvent) -> AuditRecord {
            record(self.0, event)
        }
    }

    #[test]
    fn a_record_answer_is_made_with_the_writes_own_event() {
        let intent = Intent::for_bench(true);
        let (reply, mut rx) = oneshot::channel();
        let mut appended = event(&intent);
        appended.action = "pay_invoice".to_owned();
        let write = Write::Append(Box::new(appended), Some(reply));
        assert!(write.appends());
        assert!(write.is_call_record());
        assert!(!write.has_durable_intent());
        write.answer(Answer::Record(Ok(Place(7))));
        let answered = rx.try_recv().expect("answered").expect("a record");
        assert_eq!(answered.seq, 7);
        assert_eq!(answered.event.action, "pay_invoice");
    }

    #[test]
    fn a_record_the_backend_already_made_is_answered_as_it_is() {
        let intent = Intent::for_bench(false);
        let (reply, mut rx) = oneshot::channel();
        let mut kept = event(&intent);
        kept.action = "kept".to_owned();
        let write = Write::Observe(Box::new(intent.clone()), Box::new(event(&intent)), reply);
        write.answer(Answer::Record(Ok(record(3, kept))));
        let answered = rx.try_recv().expect("answered").expect("a record");
        assert_eq!((answered.seq, answered.event.action.as_str()), (3, "kept"));
    }

    #[test]
    fn a_failed_batch_answers_every_waiting_write_with_its_error() {
        let intent = Intent::for_bench(true);
        let (intent_reply, mut intent_rx) = oneshot::channel();
        let (begin_reply, mut begin_rx) = oneshot::channel();
        let claim = Claim {
            owner: "exec-1".to_owned(),
            epoch: 1,
            until_ms: 10,
        };
        let begin = Write::Approval(Box::new(ApprovalWrite::Begin(
            ApprovalId::generate(),
            Box::new(claim),
            Box::new(intent.clone()),
            begin_reply,
        )));
        assert!(begin.has_durable_intent());
        assert!(!begin.appends());
        let writes = [Write::Intent(Box::new(intent), intent_reply), begin];
        for write in writes {
            write.fail(&|| JournalError::Stopped, &"disk full");
        }
        assert!(matches!(
            intent_rx.try_recv(),
            Ok(Err(JournalError::Stopped))
        ));
        assert!(matches!(
            begin_rx.try_recv(),
            Ok(Err(JournalError::Stopped))
        ));
    }

    #[test]
    fn an_answer_of_the_wrong_kind_never_reads_as_success() {
        let intent = Intent::for_bench(false);
        let (reply, mut rx) = oneshot::channel::<Result<(), JournalError>>();
        Write::Intent(Box::new(intent), reply).answer(Answer::<AuditRecord>::Settled(Ok(true)));
        assert!(rx.try_recv().is_err(), "the reply was dropped unanswered");
    }
}
