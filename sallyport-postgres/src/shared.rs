//! What the journal handle, its writer task and its heartbeat share.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use deadpool_postgres::Pool;
use sallyport_core::journal::batch::{ApprovalWrite, Write};
use sallyport_core::journal::{AttemptId, HeadSigningKey};
use tokio::sync::Notify;

use crate::error::Redactor;
use crate::writer::ChainEnd;

/// The pool, who this journal is, and the fencing epochs it holds.
pub(crate) struct Shared {
    pub(crate) pool: Pool,
    /// The lease owner written into this journal's attempt rows.
    pub(crate) owner: String,
    /// How long a lease lasts from its last renewal.
    pub(crate) lease: Duration,
    pub(crate) signing_key: Option<HeadSigningKey>,
    /// The audit shard this journal appends to.
    pub(crate) shard: String,
    pub(crate) redactor: Redactor,
    /// The connection target as it may be shown (no password).
    pub(crate) target: String,
    /// Attempt id → the fencing epoch this journal holds it at, for every attempt it wrote
    /// or claimed and has not closed: its appends are fenced by it, and its heartbeat
    /// renews exactly these leases.
    epochs: Mutex<HashMap<String, i64>>,
    /// Dispatch notes of a batch that failed, for attempts this journal still holds: the
    /// record writer's next batch writes them (attempt id → highest request number).
    unnoted: Mutex<HashMap<String, u32>>,
    /// Attempts whose intent is queued for the intent writer and not yet answered.
    pending_intents: Mutex<HashSet<String>>,
    /// Woken whenever the intent writer answers intents.
    intents_answered: Notify,
    /// The chain head this journal last committed, for a batch to chain on without reading
    /// it first.
    head: Mutex<HeadCache>,
    /// How a batch's transaction begins: synchronously committed, or not (a batch with
    /// nothing durable in it); each with the idle-in-transaction limit, when one is set.
    begin_durable: String,
    begin_relaxed: String,
}

/// The chain head this journal last committed, if it is likely still the head.
#[derive(Default)]
struct HeadCache {
    /// Sequence number and hash.
    known: Option<ChainEnd>,
    /// Batches still to read the head under its lock before the cache is trusted again:
    /// set when the head was found moved (another process appends to the same journal).
    read_first: u32,
}

/// Batches that read the head first after it was found moved by another process.
const READ_FIRST_AFTER_MOVE: u32 = 32;

impl Shared {
    #[allow(
        clippy::too_many_arguments,
        reason = "one call site, the builder's connect, which names each part"
    )]
    pub(crate) fn new(
        pool: Pool,
        owner: String,
        lease: Duration,
        signing_key: Option<HeadSigningKey>,
        shard: String,
        redactor: Redactor,
        target: String,
        idle_in_transaction: Duration,
    ) -> Self {
        // One message per begin, so the limit holds from the transaction's first moment.
        let limit = if idle_in_transaction.is_zero() {
            String::new()
        } else {
            // Milliseconds, at least one (zero would turn the limit off).
            let ms = idle_in_transaction.as_millis().clamp(1, i32::MAX as u128);
            format!("; SET LOCAL idle_in_transaction_session_timeout = {ms}")
        };
        Self {
            pool,
            owner,
            lease,
            signing_key,
            shard,
            redactor,
            target,
            epochs: Mutex::new(HashMap::new()),
            unnoted: Mutex::new(HashMap::new()),
            pending_intents: Mutex::new(HashSet::new()),
            intents_answered: Notify::new(),
            head: Mutex::new(HeadCache::default()),
            begin_durable: format!("BEGIN{limit}"),
            begin_relaxed: format!("BEGIN; SET LOCAL synchronous_commit TO off{limit}"),
        }
    }

    /// How a batch's transaction begins: synchronously committed when `durable`.
    pub(crate) fn begin(&self, durable: bool) -> &str {
        if durable {
            &self.begin_durable
        } else {
            &self.begin_relaxed
        }
    }

    /// The head cache; each change replaces whole fields, so a poisoned lock is taken over.
    fn head(&self) -> MutexGuard<'_, HeadCache> {
        self.head.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The chain head this journal last committed, unless the head was lately found moved
    /// by another process (then `None` for the next few batches, which read it first).
    pub(crate) fn cached_head(&self) -> Option<ChainEnd> {
        let mut head = self.head();
        if head.read_first > 0 {
            head.read_first -= 1;
            return None;
        }
        head.known.clone()
    }

    /// The head this journal just committed.
    pub(crate) fn keep_head(&self, seq: i64, hash: String) {
        self.head().known = Some((seq, hash));
    }

    /// A batch sent on the cached head was rolled back (the head had moved, or a close in it
    /// was fenced): read the head first for a while.
    pub(crate) fn head_moved(&self) {
        let mut head = self.head();
        head.known = None;
        head.read_first = READ_FIRST_AFTER_MOVE;
    }

    /// A batch failed: whether its head was written is not known.
    pub(crate) fn forget_head(&self) {
        self.head().known = None;
    }

    /// The epochs map; a holder that panicked left it consistent (each change is one
    /// insert or remove), so a poisoned lock is taken over.
    fn epochs(&self) -> MutexGuard<'_, HashMap<String, i64>> {
        self.epochs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The pending-intent set; each change is one insert or remove, so a poisoned lock is
    /// taken over.
    fn pending(&self) -> MutexGuard<'_, HashSet<String>> {
        self.pending_intents
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// An intent for `attempt` is being queued for the intent writer.
    pub(crate) fn intent_queued(&self, attempt: &str) {
        self.pending().insert(attempt.to_owned());
    }

    /// The intents for `attempts` are answered (written, refused or failed).
    pub(crate) fn intents_answered<'a>(&self, attempts: impl IntoIterator<Item = &'a str>) {
        let mut pending = self.pending();
        for attempt in attempts {
            pending.remove(attempt);
        }
        drop(pending);
        self.intents_answered.notify_waiters();
    }

    /// Waits until no write in `ops` names an attempt whose intent is still queued: a write
    /// made after its intent was queued (a cancelled call's record, made while its
    /// `write_intent` was in flight) is applied after the intent, as it was made.
    pub(crate) async fn after_their_intents(&self, ops: &[Write]) {
        loop {
            let answered = self.intents_answered.notified();
            tokio::pin!(answered);
            answered.as_mut().enable();
            let waiting = {
                let pending = self.pending();
                !pending.is_empty()
                    && ops.iter().any(|op| {
                        let attempt = match op {
                            Write::Dispatch(attempt, _) => attempt,
                            Write::Append(event, _) => &event.attempt_id,
                            _ => return false,
                        };
                        pending.contains(attempt.as_str())
                    })
            };
            if !waiting {
                return;
            }
            answered.await;
        }
    }

    /// The lease in milliseconds, as the SQL takes it.
    pub(crate) fn lease_ms(&self) -> i64 {
        i64::try_from(self.lease.as_millis()).unwrap_or(i64::MAX)
    }

    /// The epochs held for the attempts `ops` name.
    pub(crate) fn epochs_snapshot(&self, ops: &[Write]) -> HashMap<String, i64> {
        let held = self.epochs();
        ops.iter()
            .filter_map(|op| match op {
                Write::Dispatch(attempt, _) => Some(attempt.as_str()),
                Write::Append(event, _) => Some(event.attempt_id.as_str()),
                // A settled approval closes its execution, fenced like any append.
                Write::Approval(change) => match &**change {
                    ApprovalWrite::Settle(_, _, _, event, _) => Some(event.attempt_id.as_str()),
                    _ => None,
                },
                Write::Intent(..) | Write::Observe(..) | Write::SettleUnresolved(..) => None,
            })
            .filter_map(|id| held.get(id).map(|e| (id.to_owned(), *e)))
            .collect()
    }

    /// Holds each attempt at `Some(epoch)`; forgets those mapped to `None` (closed, or
    /// fenced).
    pub(crate) fn update_epochs(&self, changes: HashMap<String, Option<i64>>) {
        if changes.is_empty() {
            return;
        }
        let mut held = self.epochs();
        for (id, epoch) in changes {
            match epoch {
                Some(epoch) => {
                    held.insert(id, epoch);
                }
                None => {
                    held.remove(&id);
                }
            }
        }
    }

    /// The attempts this journal holds leases on.
    pub(crate) fn in_flight(&self) -> Vec<String> {
        self.epochs().keys().cloned().collect()
    }

    /// Gives up the attempt: no longer held, renewed or fenced by this journal, its
    /// dispatch notes not written again. The epoch it was held at, if it was.
    pub(crate) fn release(&self, attempt: &str) -> Option<i64> {
        self.unnoted().remove(attempt);
        self.epochs().remove(attempt)
    }

    /// The failed-notes map; each change is one insert or a drain, so a poisoned lock is
    /// taken over.
    fn unnoted(&self) -> MutexGuard<'_, HashMap<String, u32>> {
        self.unnoted.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps the note that request `n` of `attempt` left, from a batch that failed, to be
    /// written by the next one (only while the attempt is held: a note for an attempt given
    /// up or closed says nothing its record or a reconciler does not).
    pub(crate) fn keep_unnoted(&self, attempt: &str, n: u32) {
        if !self.epochs().contains_key(attempt) {
            return;
        }
        let mut unnoted = self.unnoted();
        let noted = unnoted.entry(attempt.to_owned()).or_insert(0);
        *noted = (*noted).max(n);
    }

    /// The kept dispatch notes of attempts still held, as writes for the next batch.
    pub(crate) fn take_unnoted(&self) -> Vec<Write> {
        let unnoted = std::mem::take(&mut *self.unnoted());
        if unnoted.is_empty() {
            return Vec::new();
        }
        let held = self.epochs();
        unnoted
            .into_iter()
            .filter(|(attempt, _)| held.contains_key(attempt))
            .map(|(attempt, n)| Write::Dispatch(AttemptId::from_stored(attempt), n))
            .collect()
    }
}
