//! Records kept through a journal outage.
//!
//! A state-changing call's intent is durable before its request leaves, and the journal
//! holds the attempt (a lease, on a backend that has them) until the call's last record
//! closes it. When that record cannot be written (the database went away after the request
//! left), the outcome is still the truth, and this process is the only one that knows it.
//! So the executor keeps the record here, in this process, and a retry task writes it when
//! the journal is back: the same record (same attempt, same receipt, the count of requests
//! the channel saw), in the order the records were kept. A call whose record comes while
//! others are kept goes behind them. The agent's answer says `record_pending`
//! ([`ActionResult::record_pending`]), with no receipt yet.
//!
//! When the record cannot be written in the end (it was kept longer than
//! [`ExecutorBuilder::kept_records_for`](super::ExecutorBuilder::kept_records_for), more
//! than 10,000 are kept, or the executor is dropped with records still kept), the
//! executor gives the attempt up with [`Journal::release_lease`]: nothing renews it any
//! more, and the reconciler settles it through the action's read-only check. An attempt
//! whose record the journal refuses as [`JournalError::Fenced`] was already closed (by a
//! write that failed on the way back but was committed, or by a reconciler that took it
//! over), and is dropped from the keep.

use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::Poll;
use std::time::{Duration, Instant};

use super::Executor;
use crate::approval::{ApprovalId, Claim};
use crate::journal::{ApprovalStore, AttemptId, AuditEvent, AuditRecord, Journal, JournalError};
use crate::outcome::ActionResult;

/// How long a record is kept by default before its attempt is given up to the reconciler.
pub(crate) const DEFAULT_KEEP_FOR: Duration = Duration::from_secs(300);

/// Most records one executor keeps; past it, a call's attempt is given up at once (its
/// answer still says `record_pending`: the reconciler writes its record).
pub(crate) const MAX_KEPT: usize = 10_000;

/// The first wait before writing kept records again, doubled after each failed try.
const FIRST_RETRY: Duration = Duration::from_millis(50);

/// The longest wait between tries.
const LAST_RETRY: Duration = Duration::from_secs(1);

/// Most kept records handed to the journal at once.
const CHUNK: usize = 256;

/// The journal's write of one kept record.
type Writing<'a> = Pin<Box<dyn Future<Output = Result<AuditRecord, JournalError>> + Send + 'a>>;

/// A call's last record that the journal could not take: a plain append, or the end of an
/// approved call stored with its approval.
#[derive(Clone, Debug)]
pub(crate) struct KeptRecord {
    event: AuditEvent,
    /// The approval the call carried out, the claim it holds, and the result to store.
    settle: Option<Box<(ApprovalId, Claim, ActionResult)>>,
}

impl KeptRecord {
    /// `event`, to append as it is.
    pub(crate) fn append(event: AuditEvent) -> Self {
        Self {
            event,
            settle: None,
        }
    }

    /// `event`, to store with `approval`'s settlement under `claim`, holding `result`.
    pub(crate) fn settle(
        event: AuditEvent,
        approval: ApprovalId,
        claim: Claim,
        result: ActionResult,
    ) -> Self {
        Self {
            event,
            settle: Some(Box::new((approval, claim, result))),
        }
    }

    fn attempt(&self) -> &AttemptId {
        &self.event.attempt_id
    }
}

/// One kept record and when it was kept.
struct Entry {
    record: KeptRecord,
    since: Instant,
}

/// The executor's kept records, and the task that writes them.
pub(crate) struct KeptRecords {
    state: Arc<State>,
}

impl std::fmt::Debug for KeptRecords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeptRecords")
            .field("kept", &self.len())
            .finish_non_exhaustive()
    }
}

struct State {
    journal: Arc<dyn Journal>,
    approvals: Option<Arc<dyn ApprovalStore>>,
    /// Oldest first: the order they are written in.
    queue: Mutex<VecDeque<Entry>>,
    /// Whether a retry task runs (only it writes kept records, in order).
    retrying: AtomicBool,
    /// Wakes the retry task before its wait is over (apart from the state, so that a
    /// waiting task does not keep a dropped executor's state alive).
    nudge: Arc<tokio::sync::Notify>,
    keep_for: Duration,
}

impl KeptRecords {
    /// Records kept for `journal` (and `approvals`, for approved calls), each at most
    /// `keep_for`.
    pub(crate) fn new(
        journal: Arc<dyn Journal>,
        approvals: Option<Arc<dyn ApprovalStore>>,
        keep_for: Duration,
    ) -> Self {
        Self {
            state: Arc::new(State {
                journal,
                approvals,
                queue: Mutex::new(VecDeque::new()),
                retrying: AtomicBool::new(false),
                nudge: Arc::new(tokio::sync::Notify::new()),
                keep_for,
            }),
        }
    }

    /// How many records are kept.
    pub(crate) fn len(&self) -> usize {
        self.state.queue().len()
    }

    /// Whether no record is kept: a call's record may be written at once, in order.
    pub(crate) fn is_empty(&self) -> bool {
        self.state.queue().is_empty()
    }

    /// A call's intent was just written while records are kept: the journal is likely back,
    /// so the retry task tries now instead of when its wait is over.
    pub(crate) fn nudge(&self) {
        self.state.nudge.notify_one();
    }

    /// Keeps `record` behind the others and makes sure a retry task will write it. Past
    /// [`MAX_KEPT`] its attempt is given up instead.
    pub(crate) fn keep(&self, record: KeptRecord) {
        {
            let mut queue = self.state.queue();
            if queue.len() >= MAX_KEPT {
                drop(queue);
                tracing::error!(attempt = %record.attempt(), kept = MAX_KEPT, "too many records kept while the journal is unavailable; this attempt is left to the reconciler");
                self.state.journal.release_lease(record.attempt());
                return;
            }
            tracing::warn!(attempt = %record.attempt(), "the call's record could not be written; kept until the journal is back");
            queue.push_back(Entry {
                record,
                since: Instant::now(),
            });
        }
        State::start_retrying(&self.state);
    }
}

impl State {
    /// The queue; each change is one push or pop, so a poisoned lock is taken over.
    fn queue(&self) -> MutexGuard<'_, VecDeque<Entry>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts the retry task unless one runs (outside a Tokio runtime none can start: the
    /// next record kept from inside one starts it).
    fn start_retrying(state: &Arc<Self>) {
        if state.retrying.swap(true, Ordering::SeqCst) {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(retry(Arc::downgrade(state), Arc::clone(&state.nudge)));
            }
            Err(_) => state.retrying.store(false, Ordering::SeqCst),
        }
    }

    /// Writes kept records, oldest first, [`CHUNK`] at a time, until a write fails; gives up
    /// the ones kept too long. Whether the queue is empty now.
    ///
    /// A chunk's writes are all handed to the journal, in order, before any is awaited (a
    /// batching journal then commits them together, in that order), so a backlog drains in
    /// a few round trips while new calls' records wait behind it.
    async fn write_kept(&self) -> bool {
        loop {
            self.give_up_expired();
            // Copies are written: an entry leaves the queue only once the journal has it.
            let chunk: Vec<KeptRecord> = self
                .queue()
                .iter()
                .take(CHUNK)
                .map(|e| e.record.clone())
                .collect();
            if chunk.is_empty() {
                return true;
            }
            let attempts: Vec<AttemptId> = chunk.iter().map(|r| r.attempt().clone()).collect();
            let mut writes: Vec<Writing<'_>> = chunk.into_iter().map(|r| self.write(r)).collect();
            let mut results: Vec<Option<Result<u64, JournalError>>> =
                writes.iter().map(|_| None).collect();
            // Polled in order: each write is queued by the journal on its first poll.
            std::future::poll_fn(|cx| {
                let mut waiting = false;
                for (write, result) in writes.iter_mut().zip(results.iter_mut()) {
                    if result.is_none() {
                        match write.as_mut().poll(cx) {
                            Poll::Ready(done) => *result = Some(done.map(|r| r.seq)),
                            Poll::Pending => waiting = true,
                        }
                    }
                }
                if waiting {
                    Poll::Pending
                } else {
                    Poll::Ready(())
                }
            })
            .await;
            drop(writes);
            let mut done: HashSet<AttemptId> = HashSet::new();
            let mut failed = false;
            for (attempt, result) in attempts.into_iter().zip(results.into_iter().flatten()) {
                match result {
                    Ok(seq) => {
                        tracing::info!(attempt = %attempt, seq, "kept record written");
                        done.insert(attempt);
                    }
                    Err(JournalError::Fenced) => {
                        tracing::info!(attempt = %attempt, "kept record not needed: the attempt is already closed");
                        done.insert(attempt);
                    }
                    Err(JournalError::Unsupported(what)) => {
                        tracing::error!(attempt = %attempt, unsupported = what, "kept record cannot be written; the attempt is left to the reconciler");
                        self.journal.release_lease(&attempt);
                        done.insert(attempt);
                    }
                    Err(e) => {
                        tracing::debug!(attempt = %attempt, error = %e, "the journal is still unavailable");
                        failed = true;
                    }
                }
            }
            self.queue().retain(|e| !done.contains(e.record.attempt()));
            if failed {
                return false;
            }
        }
    }

    /// The journal's write of one kept record (it does nothing until polled).
    fn write(&self, record: KeptRecord) -> Writing<'_> {
        match record.settle {
            Some(settle) => {
                let (approval, claim, result) = *settle;
                match &self.approvals {
                    Some(store) => Box::pin(async move {
                        store
                            .settle_approval(&approval, &claim, &result, record.event)
                            .await
                    }),
                    None => Box::pin(std::future::ready(Err(JournalError::Unsupported(
                        "approvals",
                    )))),
                }
            }
            None => self.journal.append(record.event),
        }
    }

    /// Gives up every record kept longer than `keep_for`: its attempt is released for the
    /// reconciler.
    fn give_up_expired(&self) {
        let expired: VecDeque<Entry> = {
            let mut queue = self.queue();
            let (expired, kept): (VecDeque<Entry>, VecDeque<Entry>) = std::mem::take(&mut *queue)
                .into_iter()
                .partition(|e| e.since.elapsed() >= self.keep_for);
            *queue = kept;
            expired
        };
        for entry in expired {
            tracing::error!(attempt = %entry.record.attempt(), "the call's record could not be written in time; the attempt is left to the reconciler");
            self.journal.release_lease(entry.record.attempt());
        }
    }
}

impl Drop for State {
    /// The executor is gone with records still kept: nothing will write them, so their
    /// attempts are given up to the reconciler.
    fn drop(&mut self) {
        let queue = std::mem::take(&mut *self.queue());
        for entry in queue {
            tracing::error!(attempt = %entry.record.attempt(), "the executor stopped before the call's record could be written; the attempt is left to the reconciler");
            self.journal.release_lease(entry.record.attempt());
        }
    }
}

/// The retry task: writes the kept records, waiting longer after each failed try (or until
/// nudged), until none is left or the executor is gone.
async fn retry(state: Weak<State>, nudge: Arc<tokio::sync::Notify>) {
    let mut wait = FIRST_RETRY;
    loop {
        // Over when the wait is, or when a call nudges it.
        let _ = tokio::time::timeout(wait, nudge.notified()).await;
        let Some(state) = state.upgrade() else {
            return;
        };
        if state.write_kept().await {
            state.retrying.store(false, Ordering::SeqCst);
            // A record kept after the queue was seen empty and before the flag went down
            // found a task running: keep going for it.
            if state.queue().is_empty() || state.retrying.swap(true, Ordering::SeqCst) {
                return;
            }
            wait = FIRST_RETRY;
        } else {
            wait = (wait * 2).min(LAST_RETRY);
        }
    }
}

impl Executor {
    /// How many calls' last records this executor keeps because the journal could not take
    /// them (their answers said `record_pending`). A task writes them, oldest first, as
    /// soon as the journal takes writes again; a record kept longer than
    /// [`ExecutorBuilder::kept_records_for`](super::ExecutorBuilder::kept_records_for)
    /// (5 minutes by default) is given up, and its attempt left to [`Executor::reconcile`].
    /// Dropping the executor gives up what it still keeps.
    pub fn kept_records(&self) -> usize {
        self.inner.kept.len()
    }
}
