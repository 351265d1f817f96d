//! Flat combining: the queues concurrent writes wait in, the task or thread that applies
//! them in batches, and the answers each write gets once its batch is committed.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError, mpsc};

use super::batch::Writer;
use super::statements::Link;
use rusqlite::Connection;
use sallyport_kernel::approval::{Approval, ApprovalFilter, ApprovalId, Transition};
use sallyport_kernel::journal::batch::{Answer, ApprovalWrite, Reply, Write};
use sallyport_kernel::journal::chain::ChainRow;
use sallyport_kernel::journal::checkpoint::Checkpoint;
use sallyport_kernel::journal::retention::Anchor;
use sallyport_kernel::journal::signing::{HeadVerifyingKey, SignedHead};
use sallyport_kernel::journal::{AuditRecord, JournalError, UnresolvedAttempt, VerifyReport};

/// Locks `mutex`; a writer that panicked leaves nothing half-written behind the lock (each
/// batch is one transaction), so a poisoned lock is taken over.
pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the journal handle and its thread share.
pub(super) struct Shared {
    /// Writes that need no fsync, in the order they were made.
    pub(super) queued: Mutex<Vec<Write>>,
    /// Durable intents and reads, for the journal thread only.
    pub(super) thread_ops: Mutex<Vec<Op>>,
    /// The one connection that writes.
    pub(super) writer: Mutex<Writer>,
    /// How recently calls were seen to finish together: set to [`CONCURRENT`] when a batch
    /// held the last records of more than one call, lowered by one for each batch that held
    /// one. While it is above zero, a call's last record waits one turn of
    /// the scheduler before it is applied, so that the records of calls finishing beside it
    /// share its transaction (see `SqliteJournal::write_here_batched`); a lone caller never
    /// waits.
    pub(super) concurrent: AtomicU8,
    /// A commit left the WAL long enough for a checkpoint, which the journal thread makes
    /// (see [`Writer::new`]).
    pub(super) checkpoint_due: AtomicBool,
}

/// What [`Shared::concurrent`] is set to when calls finish together: eight batches with one
/// call's record in a row end the waiting.
pub(super) const CONCURRENT: u8 = 8;

/// Most batches one task applies for others before it hands the rest to the journal thread.
const MAX_COMBINE_ROUNDS: usize = 4;

impl Shared {
    /// Flat combining: whoever holds the connection applies everything queued, then, after
    /// letting go, looks at the queue again. A write queued before a failed `try_lock` is
    /// therefore always applied: either by the holder's look after letting go (the push came
    /// first) or by a later holder (which took the lock after the push). Returns `false`
    /// when the queue was still busy after [`MAX_COMBINE_ROUNDS`] batches, or when a batch
    /// asked for a checkpoint: the caller then wakes the journal thread rather than keep one
    /// async task writing for everyone, or checkpointing before its answer.
    pub(super) fn combine(&self) -> bool {
        let mut checkpoint = false;
        for _ in 0..MAX_COMBINE_ROUNDS {
            checkpoint |= match self.writer.try_lock() {
                Ok(mut writer) => self.apply_queued(&mut writer),
                Err(TryLockError::Poisoned(poisoned)) => {
                    self.apply_queued(&mut poisoned.into_inner())
                }
                Err(TryLockError::WouldBlock) => return !checkpoint,
            };
            if lock(&self.queued).is_empty() {
                return !checkpoint;
            }
        }
        false
    }

    /// Applies one batch of queued writes, if any. Returns whether the journal thread must
    /// be woken for a checkpoint (asked for by this batch, and not already due).
    fn apply_queued(&self, writer: &mut Writer) -> bool {
        let ops = std::mem::take(&mut *lock(&self.queued));
        let records = ops.iter().filter(|op| op.is_call_record()).count();
        if records > 1 {
            self.concurrent.store(CONCURRENT, Ordering::Relaxed);
        } else if records == 1 {
            let _ = self
                .concurrent
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        }
        if !ops.is_empty() {
            writer.write_all(ops);
        }
        writer.take_checkpoint_ask() && !self.checkpoint_due.swap(true, Ordering::Relaxed)
    }

    /// The journal thread: woken for durable intents, reads, writes nobody waits for,
    /// writes the connection was too busy to take, and checkpoints, which it makes on
    /// `checkpointer`, its own connection, while writes go on. Finishes the queues when the
    /// handle is dropped.
    pub(super) fn run(&self, woken: &mpsc::Receiver<()>, checkpointer: Option<&Connection>) {
        let mut stopping = false;
        loop {
            // Look at the queues before sleeping: writes queued while the connection was
            // held are this thread's to apply when it held it (see `combine`).
            if !self.has_work() {
                if stopping {
                    return;
                }
                stopping = woken.recv().is_err();
                while woken.try_recv().is_ok() {}
            }
            let mut writer = lock(&self.writer);
            loop {
                // Queued writes first: they were made before anything now in `thread_ops`
                // that depends on them.
                let mut writes = std::mem::take(&mut *lock(&self.queued));
                let mut reads = Vec::new();
                for op in std::mem::take(&mut *lock(&self.thread_ops)) {
                    match op {
                        Op::Write(write) => writes.push(write),
                        Op::Read(read) => reads.push(read),
                    }
                }
                if writes.is_empty() && reads.is_empty() {
                    break;
                }
                writer.write_all(writes);
                for op in reads {
                    writer.read(op);
                }
            }
            if writer.take_checkpoint_ask() {
                self.checkpoint_due.store(true, Ordering::Relaxed);
            }
            drop(writer);
            if self.checkpoint_due.swap(false, Ordering::Relaxed)
                && let Some(conn) = checkpointer
            {
                // The bulk of the copy while this process's writes go on; then, with them
                // held, the frames written meanwhile. SQLite starts the WAL over only when a
                // write transaction begins with every frame copied, which a checkpoint that
                // always lags the writer never allows: the WAL would grow without end.
                // Writes queued while the connection is held here are applied by this loop's
                // next turn (see `combine`).
                checkpoint(conn);
                let _writes_held = lock(&self.writer);
                checkpoint(conn);
            }
        }
    }

    fn has_work(&self) -> bool {
        !lock(&self.queued).is_empty()
            || !lock(&self.thread_ops).is_empty()
            || self.checkpoint_due.load(Ordering::Relaxed)
    }
}

/// A passive checkpoint: copies into the database the WAL frames no reader still needs,
/// without waiting for the writer. A failed one is logged and asked for again by a later
/// commit; the WAL only grows meanwhile.
pub(super) fn checkpoint(conn: &Connection) {
    if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
        tracing::warn!(error = %e, "journal checkpoint failed");
    }
}

/// One queued operation: a write, or a read for the journal thread.
pub(super) enum Op {
    /// A write (see [`Write`]).
    Write(Write),
    /// A read, answered on the journal thread between batches.
    Read(Read),
}

impl Op {
    /// Whether the journal thread applies it: a read, or a write whose intent must be
    /// fsynced (the thread's batches commit with `synchronous=FULL`). Other writes are
    /// queued for whichever task holds the connection.
    pub(super) fn is_for_thread(&self) -> bool {
        match self {
            Self::Write(write) => write.has_durable_intent(),
            Self::Read(_) => true,
        }
    }
}

impl From<Write> for Op {
    fn from(write: Write) -> Self {
        Self::Write(write)
    }
}

impl From<Read> for Op {
    fn from(read: Read) -> Self {
        Self::Read(read)
    }
}

/// A read, for the journal thread.
pub(super) enum Read {
    Verify(Reply<VerifyReport>),
    VerifySigned(Box<HeadVerifyingKey>, Reply<VerifyReport>),
    Heads(Reply<Vec<SignedHead>>),
    Records(Reply<Vec<AuditRecord>>),
    ChainRows(Reply<Vec<ChainRow>>),
    Checkpoints(Reply<Vec<Checkpoint>>),
    Anchors(Reply<Vec<Anchor>>),
    Unresolved(Reply<Vec<UnresolvedAttempt>>),
    Approval(ApprovalId, Reply<Option<Approval>>),
    Approvals(Box<ApprovalFilter>, Reply<Vec<Approval>>),
}

/// Why a write failed, kept until its caller is answered. SQLite's error is shared, not
/// copied, when one failure answers a whole batch.
#[derive(Clone, Debug)]
pub(super) enum Failure {
    /// The attempt id, idempotency key or approval id is already recorded.
    DuplicateKey,
    /// The approval is not (or no longer) held under the claim the write was made with.
    Fenced,
    /// What SQLite said.
    Sqlite(Arc<rusqlite::Error>),
}

impl From<rusqlite::Error> for Failure {
    fn from(e: rusqlite::Error) -> Self {
        Self::Sqlite(Arc::new(e))
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DuplicateKey => f.write_str("duplicate key"),
            Self::Fenced => f.write_str("claim taken over"),
            Self::Sqlite(e) => e.fmt(f),
        }
    }
}

impl Failure {
    /// The error the caller is answered with.
    fn into_error(self) -> JournalError {
        match self {
            Self::DuplicateKey => JournalError::DuplicateKey,
            Self::Fenced => JournalError::Fenced,
            Self::Sqlite(e) => JournalError::Write(Box::new(e)),
        }
    }

    /// The failure for writes whose transaction SQLite rolled back on its own.
    pub(super) fn aborted() -> Self {
        Self::from(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT),
            Some("the batch's transaction was rolled back after a failed write".to_owned()),
        ))
    }
}

/// What one write produced, answered after the commit.
pub(super) enum Done {
    Intent(Result<(), Failure>),
    /// An appended record's place in the chain; its event is still the operation's.
    Record(Box<Result<Link, Failure>>),
    /// A compare-and-set's answer; `Unchanged` and `NotFound` wrote nothing and are no failure.
    Transition(Box<Result<Transition, Failure>>),
    /// A reconciler's compare-and-set: whether it appended.
    Settled(Result<bool, Failure>),
    Nothing(Result<(), Failure>),
}

impl Done {
    pub(super) fn failed(&self) -> bool {
        match self {
            Self::Intent(r) | Self::Nothing(r) => r.is_err(),
            Self::Record(r) => r.is_err(),
            Self::Transition(r) => r.is_err(),
            Self::Settled(r) => r.is_err(),
        }
    }

    /// The SQLite error behind a failed write, for answering the rest of its batch.
    pub(super) fn cause(&self) -> Failure {
        let failure = match self {
            Self::Intent(r) | Self::Nothing(r) => r.as_ref().err(),
            Self::Record(r) => r.as_ref().as_ref().err(),
            Self::Transition(r) => r.as_ref().as_ref().err(),
            Self::Settled(r) => r.as_ref().err(),
        };
        match failure {
            Some(f @ Failure::Sqlite(_)) => f.clone(),
            _ => Failure::aborted(),
        }
    }
}

impl Done {
    /// The answer its write's caller gets.
    fn into_answer(self) -> Answer<Link> {
        match self {
            Self::Intent(r) | Self::Nothing(r) => Answer::Done(r.map_err(Failure::into_error)),
            Self::Record(r) => Answer::Record((*r).map_err(Failure::into_error)),
            Self::Transition(r) => Answer::Transition(Box::new((*r).map_err(Failure::into_error))),
            Self::Settled(r) => Answer::Settled(r.map_err(Failure::into_error)),
        }
    }
}

/// Answers every write of a batch that was not written.
pub(super) fn fail_all(ops: Vec<Write>, e: &Failure) {
    for op in ops {
        op.fail(&|| e.clone().into_error(), e);
    }
}

/// What `op` reports when its write failed with `e`.
pub(super) fn failed(op: &Write, e: &Failure) -> Done {
    let change = match op {
        Write::Intent(..) => return Done::Intent(Err(e.clone())),
        Write::Append(..) | Write::Observe(..) => return Done::Record(Box::new(Err(e.clone()))),
        Write::SettleUnresolved(..) => return Done::Settled(Err(e.clone())),
        Write::Dispatch(..) => return Done::Nothing(Err(e.clone())),
        Write::Approval(change) => &**change,
    };
    match change {
        ApprovalWrite::Begin(..) => Done::Intent(Err(e.clone())),
        ApprovalWrite::Park(..) | ApprovalWrite::Settle(..) => {
            Done::Record(Box::new(Err(e.clone())))
        }
        ApprovalWrite::Decide(..) | ApprovalWrite::Expire(..) | ApprovalWrite::Claim(..) => {
            Done::Transition(Box::new(Err(e.clone())))
        }
    }
}

/// Sends each write its outcome, once the batch is committed (or has failed).
pub(super) fn reply_all(ops: Vec<Write>, done: Vec<Done>) {
    for (op, done) in ops.into_iter().zip(done) {
        op.answer(done.into_answer());
    }
}
