//! sallyport-sqlite: the embedded sallyport journal — durable intents, approvals and the
//! hash-chained audit log in one SQLite file (WAL mode, one connection, writes combined into
//! batches).
//!
//! Most programs name it through `sallyport-core`, whose default feature `sqlite`
//! re-exports it as `sallyport_core::journal::SqliteJournal`:
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use sallyport_kernel::journal::HeadSigningKey;
//! use sallyport_sqlite::SqliteJournal;
//! # let dir = tempfile::tempdir()?;
//! # let path = dir.path().join("journal.db");
//! // One file; created with mode 0600 if missing, its schema upgraded in place if older.
//! let journal = SqliteJournal::open(&path)?;
//! # drop(journal);
//! // Or with every appending batch's head signed (`Journal::verify_signed` checks them).
//! let key = HeadSigningKey::generate()?;
//! let signed = SqliteJournal::builder(&path).signing_key(key).open()?;
//! # drop(signed);
//! # Ok(()) }
//! ```
//!
//! # How it writes
//!
//!
//! Writes queue up and whoever holds the connection applies everything queued (up to
//! [`MAX_BATCH`] operations a transaction) and commits once, so 64 concurrent calls share one
//! commit instead of taking turns.
//!
//! * A write the caller waits for that needs no fsync (every audit record, an observe call's
//!   closed attempt and record) is applied on the calling task when the connection is free: a `synchronous=NORMAL`
//!   WAL commit, tens of microseconds of blocking I/O, and no hand-off to another thread. When
//!   the connection is busy, its holder applies the write before letting go (flat combining).
//!   No commit checkpoints: a commit that leaves the WAL at 1,000 pages or more (a few
//!   hundred calls) wakes the journal thread, which copies the WAL back into the database on
//!   a connection of its own while writes go on, then copies the few frames written
//!   meanwhile with writes held for that moment, so that the WAL starts over. Left to SQLite,
//!   the whole checkpoint would run inside whichever commit crossed the threshold, and that
//!   call would wait milliseconds for its answer.
//! * A durable intent (a mutating call's, before anything is sent) goes to the journal
//!   thread, whose batch commits with `synchronous=FULL`: the WAL is fsynced before any caller
//!   is answered, and the fsync never blocks an async worker.
//! * Writes nobody waits for (dispatch notes, the record of a dropped call) and reads go to
//!   the journal thread too. Writes are applied in the order they were queued.
//!
//! `synchronous=NORMAL` survives a process crash but not a power loss; FULL survives both.
//!
//! Approvals (see [`sallyport_kernel::approval`]) are rows of their own table. Every change of one is a
//! compare-and-set applied in a batch like any other write, so it runs inside the batch's
//! `BEGIN IMMEDIATE` transaction (which holds against other processes on the file) together
//! with its audit record; decisions, expiries, claims and settlements commit like audit
//! records, an approved call's durable intent like any durable intent (fsync'd).
//!
//! The policy's call counts ([`sallyport_kernel::policy::calls`]) live in the file too
//! (`Journal::call_store`): one row per call a policy let through, decided and counted in one
//! `BEGIN IMMEDIATE` transaction on a connection of their own, so every process on the file
//! sees one count and a limit holds across them. Rows older than a day are deleted as calls
//! are counted.
//!
//! Files: `open` (schema, migration, permissions), `calls` (the policy's call counts), `combine` (the queues, flat combining,
//! answers), `batch` (one transaction per batch), `statements` (the SQL and row mapping),
//! `approvals` (the approval store's compare-and-sets and reads), `decisions` (the poll that
//! wakes a worker when a call is approved).

mod anchors;
#[cfg(test)]
mod approval_tests;
mod approvals;
mod batch;
mod calls;
mod checkpoints;
mod combine;
mod decisions;
mod open;
mod remembered;
mod statements;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::oneshot;

pub use self::batch::MAX_BATCH;
use self::batch::Writer;
use self::combine::{Op, Read, Shared, lock};
use self::decisions::DecisionPoller;
use self::open::{OpenOptions, open_connection};
use sallyport_kernel::approval::{
    Approval, ApprovalDecision, ApprovalFilter, ApprovalId, Claim, RememberedApproval,
    RememberedId, Revocation, Revoked, Transition,
};
use sallyport_kernel::journal::batch::{ApprovalWrite, ClaimRequest, Write};
use sallyport_kernel::journal::chain::ChainRow;
use sallyport_kernel::journal::checkpoint::Checkpoint;
use sallyport_kernel::journal::retention::Anchor;
use sallyport_kernel::journal::signing::{HeadSigningKey, HeadVerifyingKey, SignedHead};
use sallyport_kernel::journal::{
    ApprovalStore, AttemptId, AuditEvent, AuditRecord, DecisionWatch, Intent, Journal,
    JournalError, UnresolvedAttempt, VerifyReport,
};
use sallyport_kernel::outcome::ActionResult;
use sallyport_kernel::policy::calls::CallStore;

/// Configures a [`SqliteJournal`].
#[derive(Debug)]
#[must_use]
pub struct SqliteJournalBuilder {
    path: PathBuf,
    busy_timeout: Duration,
    max_size: Option<u64>,
    signing_key: Option<HeadSigningKey>,
    decision_poll: Duration,
}

impl SqliteJournalBuilder {
    /// Caps the journal's database file at about `bytes` (rounded down to whole pages; no
    /// cap by default). When the journal is full, writes fail as they would on a full disk:
    /// calls are refused with `journal_unavailable` and nothing is sent. The WAL file can
    /// briefly hold more until it is checkpointed. A cap below the file's current size keeps
    /// the current size.
    pub fn max_size(mut self, bytes: u64) -> Self {
        self.max_size = Some(bytes);
        self
    }

    /// How long a write waits for another connection's lock before failing (default 5 s).
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// Signs the chain head with `key` in every batch of writes that appends a record (the
    /// signature is stored in the journal's `heads` table, beside the chain). With a key,
    /// `sallyport audit verify --public-key` (or [`Journal::verify_signed`]) proves that no
    /// record up to the last signed head was rewritten by someone who could write the file
    /// but did not hold the key. Costs one Ed25519 signature and one row per batch, and
    /// nothing when no key is given.
    pub fn signing_key(mut self, key: HeadSigningKey) -> Self {
        self.signing_key = Some(key);
        self
    }

    /// How often a worker's watch on decisions
    /// ([`ApprovalStore::watch_decisions`], which `Executor::run_approval_worker` waits
    /// on) reads `PRAGMA data_version` to learn that another connection committed (default
    /// 5 ms, at least 1 ms). A decision made by another process reaches the worker within
    /// about this long; each read costs a few microseconds, and nothing is read while no
    /// worker watches.
    pub fn decision_poll(mut self, every: Duration) -> Self {
        self.decision_poll = every;
        self
    }

    /// Opens (or creates) the journal and starts its writer thread.
    ///
    /// Safe when several processes open one new file at once: the schema is created in one
    /// transaction that takes the write lock first, and a process that finds the lock held
    /// waits (up to the busy timeout) instead of reading a half-made schema.
    ///
    /// # Errors
    ///
    /// [`JournalError::Corrupt`] for a file that is not a journal (left untouched),
    /// [`JournalError::NewerFormat`] for a newer format, [`JournalError::Open`] otherwise
    /// (including a lock still held by another process after the busy timeout).
    pub fn open(self) -> Result<SqliteJournal, JournalError> {
        let conn = open_connection(&OpenOptions {
            path: &self.path,
            busy_timeout: self.busy_timeout,
            max_size: self.max_size,
            signing: self.signing_key.is_some(),
        })?;
        // Without a second connection, SQLite checkpoints inside commits, as by default.
        let checkpointer = open::open_checkpointer(&self.path);
        let shared = Arc::new(Shared {
            queued: Mutex::new(Vec::new()),
            thread_ops: Mutex::new(Vec::new()),
            concurrent: AtomicU8::new(0),
            checkpoint_due: AtomicBool::new(false),
            writer: Mutex::new(Writer::new(conn, self.signing_key, checkpointer.is_some())),
        });
        let (wake, woken) = mpsc::channel::<()>();
        let for_thread = Arc::clone(&shared);
        let handle = thread::Builder::new()
            .name("sallyport-journal".into())
            .spawn(move || for_thread.run(&woken, checkpointer.as_ref()))
            .map_err(|e| JournalError::Open {
                path: self.path.display().to_string(),
                source: Box::new(e),
            })?;
        let decisions = Arc::new(DecisionPoller::new(
            self.path.clone(),
            self.decision_poll,
            self.busy_timeout,
        ));
        Ok(SqliteJournal {
            shared,
            decisions,
            wake,
            busy_timeout: self.busy_timeout,
            remembered: remembered::SqliteRemembered::new(self.path.clone(), self.busy_timeout),
            path: self.path,
            _thread: handle,
        })
    }
}

/// The embedded SQLite journal (the default).
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use sallyport_kernel::journal::Journal;
/// use sallyport_sqlite::SqliteJournal;
/// let journal = SqliteJournal::open("sallyport-journal.db")?;
/// let report = journal.verify().await?;
/// assert!(report.is_intact());
/// # Ok(()) }
/// ```
pub struct SqliteJournal {
    shared: Arc<Shared>,
    /// The workers' watches on decisions, and the thread that polls for them.
    decisions: Arc<DecisionPoller>,
    /// Wakes the journal thread; dropping it makes the thread finish the queue and exit.
    wake: mpsc::Sender<()>,
    path: PathBuf,
    /// How long a write waits for another connection's lock.
    busy_timeout: Duration,
    /// The remembered approvals, on a connection of their own.
    remembered: remembered::SqliteRemembered,
    _thread: thread::JoinHandle<()>,
}

impl std::fmt::Debug for SqliteJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteJournal")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteJournal {
    /// Opens (or creates) the journal at `path` with default settings.
    ///
    /// # Errors
    ///
    /// See [`SqliteJournalBuilder::open`].
    pub fn open(path: impl AsRef<Path>) -> Result<Self, JournalError> {
        Self::builder(path).open()
    }

    /// A builder for the journal at `path`.
    pub fn builder(path: impl AsRef<Path>) -> SqliteJournalBuilder {
        SqliteJournalBuilder {
            path: path.as_ref().to_path_buf(),
            busy_timeout: Duration::from_secs(5),
            max_size: None,
            signing_key: None,
            decision_poll: decisions::DEFAULT_POLL,
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Queues `op` for the journal thread and wakes it.
    fn to_thread(&self, op: impl Into<Op>) {
        match op.into() {
            Op::Write(write) if !write.has_durable_intent() => {
                lock(&self.shared.queued).push(write);
            }
            op => {
                debug_assert!(op.is_for_thread());
                lock(&self.shared.thread_ops).push(op);
            }
        }
        let _ = self.wake.send(());
    }

    /// Sends `op` to the journal thread (on the first poll) and waits for its answer.
    ///
    /// The operation is made now and only queued when the future is first polled: the
    /// future holds the operation (56 bytes, its payload boxed), not the values it is made
    /// of, and not those values again in the closure that made it.
    fn ask<T, O: Into<Op> + Send + 'static>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, JournalError>>) -> O,
    ) -> impl Future<Output = Result<T, JournalError>> + Send + '_
    where
        T: Send + 'static,
    {
        let (reply, rx) = oneshot::channel();
        let op = make(reply);
        async move {
            self.to_thread(op);
            rx.await.map_err(|_| JournalError::Stopped)?
        }
    }

    /// Queues a write that needs no fsync and applies the queue on this task when the
    /// connection is free; otherwise the task holding the connection applies it. Made now,
    /// queued on the first poll, as with [`Self::ask`].
    fn write_here<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, JournalError>>) -> Write,
    ) -> impl Future<Output = Result<T, JournalError>> + Send + '_
    where
        T: Send + 'static,
    {
        let (reply, rx) = oneshot::channel();
        let op = make(reply);
        async move {
            lock(&self.shared.queued).push(op);
            self.apply_queued_and_wait(rx).await
        }
    }

    /// Applies the queue on this task (or leaves it to the task holding the connection, or
    /// the journal thread) and waits for the answer to a write queued before.
    async fn apply_queued_and_wait<T>(
        &self,
        rx: oneshot::Receiver<Result<T, JournalError>>,
    ) -> Result<T, JournalError> {
        if !self.shared.combine() {
            let _ = self.wake.send(());
        }
        rx.await.map_err(|_| JournalError::Stopped)?
    }

    /// [`Self::write_here`] for a call's last record. While calls have lately been finishing
    /// together ([`Shared::concurrent`]), it first lets the other tasks that are ready on this
    /// worker run: calls finishing beside this one queue their records in that time, and one
    /// transaction then takes them all. At 64 calls in flight the executor's throughput rose
    /// by 14–19% (`http_ratio_64_in_flight` in benchmarks/history.md); with the yield taken every
    /// time, batches had grown from 1.4 writes to 4.1. A lone caller applies its write at once, as before: the one turn of
    /// the scheduler cost it 5–28 µs in the core bench's hot loop.
    ///
    /// The write is handed over when it is queued, on the first poll: a call whose future
    /// is dropped while it waits its turn leaves it in the queue, wakes the journal thread
    /// to apply it, and is recorded once, by this record (the executor does not record it
    /// again as cancelled; see [`Journal::append`]).
    fn write_here_batched<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, JournalError>>) -> Write,
    ) -> impl Future<Output = Result<T, JournalError>> + Send + '_
    where
        T: Send + 'static,
    {
        let (reply, rx) = oneshot::channel();
        let op = make(reply);
        async move {
            lock(&self.shared.queued).push(op);
            if self.shared.concurrent.load(Ordering::Relaxed) > 0 {
                let mut waiting = Waiting {
                    wake: &self.wake,
                    armed: true,
                };
                tokio::task::yield_now().await;
                waiting.armed = false;
            }
            self.apply_queued_and_wait(rx).await
        }
    }
}

/// A queued write whose task has not yet tried to apply it: dropped armed (the task was
/// cancelled in its turn), it wakes the journal thread, which applies the write unless a
/// batch has taken it first.
struct Waiting<'a> {
    wake: &'a mpsc::Sender<()>,
    armed: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.wake.send(());
        }
    }
}

#[async_trait]
impl Journal for SqliteJournal {
    async fn write_intent(&self, intent: &Intent) -> Result<(), JournalError> {
        let intent = intent.clone();
        if intent.durable {
            self.ask(|reply| Write::Intent(Box::new(intent), reply))
                .await
        } else {
            self.write_here(|reply| Write::Intent(Box::new(intent), reply))
                .await
        }
    }

    fn note_dispatch(&self, attempt: &AttemptId, n: u32) {
        self.to_thread(Write::Dispatch(attempt.clone(), n));
    }

    // `append` and `append_with_intent` are written out, not `async fn`s: the future
    // `async_trait` boxes then holds the write's operation, not the event and intent it is
    // made of as well (an observe call's was 1,568 bytes, which glibc serves from its large
    // bins, consolidating first; now 112).
    fn append<'life0, 'async_trait>(
        &'life0 self,
        event: AuditEvent,
    ) -> Pin<Box<dyn Future<Output = Result<AuditRecord, JournalError>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(self.write_here_batched(|reply| Write::Append(Box::new(event), Some(reply))))
    }

    fn append_with_intent<'life0, 'async_trait>(
        &'life0 self,
        intent: Intent,
        event: AuditEvent,
    ) -> Pin<Box<dyn Future<Output = Result<AuditRecord, JournalError>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        let durable = intent.durable;
        let op = |reply| Write::Observe(Box::new(intent), Box::new(event), reply);
        if durable {
            Box::pin(self.ask(op))
        } else {
            Box::pin(self.write_here_batched(op))
        }
    }

    fn append_detached(&self, event: AuditEvent) {
        self.to_thread(Write::Append(Box::new(event), None));
    }

    async fn verify(&self) -> Result<VerifyReport, JournalError> {
        self.ask(Read::Verify).await
    }

    async fn signed_heads(&self) -> Result<Vec<SignedHead>, JournalError> {
        self.ask(Read::Heads).await
    }

    async fn verify_signed(&self, key: &HeadVerifyingKey) -> Result<VerifyReport, JournalError> {
        let key = Box::new(*key);
        self.ask(|reply| Read::VerifySigned(key, reply)).await
    }

    async fn records(&self) -> Result<Vec<AuditRecord>, JournalError> {
        self.ask(Read::Records).await
    }

    /// The `audit` rows, the event JSON as stored.
    async fn chain_rows(&self) -> Result<Vec<ChainRow>, JournalError> {
        self.ask(Read::ChainRows).await
    }

    async fn checkpoints(&self) -> Result<Vec<Checkpoint>, JournalError> {
        self.ask(Read::Checkpoints).await
    }

    /// Stored in the file's table `checkpoints`, on a connection of its own.
    async fn store_checkpoint(&self, checkpoint: &Checkpoint) -> Result<(), JournalError> {
        checkpoints::store(&self.path, self.busy_timeout, checkpoint)
    }

    async fn unresolved(&self) -> Result<Vec<UnresolvedAttempt>, JournalError> {
        self.ask(Read::Unresolved).await
    }

    async fn anchors(&self) -> Result<Vec<Anchor>, JournalError> {
        self.ask(Read::Anchors).await
    }

    /// In one `BEGIN IMMEDIATE` transaction on a connection of its own, with
    /// `secure_delete` on (the deleted records' bytes are overwritten in the file); only the
    /// default shard, the one this file holds.
    async fn prune_sealed(&self, anchor: &Anchor) -> Result<u64, JournalError> {
        anchors::prune(&self.path, self.busy_timeout, anchor)
    }

    async fn settle_unresolved(
        &self,
        attempt: &AttemptId,
        event: AuditEvent,
    ) -> Result<bool, JournalError> {
        let attempt = attempt.clone();
        self.write_here(|reply| Write::SettleUnresolved(attempt, Box::new(event), reply))
            .await
    }

    fn approval_store(self: Arc<Self>) -> Option<Arc<dyn ApprovalStore>> {
        Some(self)
    }

    /// The policy's call counts in this file (table `policy_calls`), shared by every
    /// process that opens it: deciding holds the file's write lock (`BEGIN IMMEDIATE`), so a
    /// limit holds across them. Each store has its connection, opened on first use.
    fn call_store(self: Arc<Self>) -> Option<Arc<dyn CallStore>> {
        Some(Arc::new(calls::SqliteCallStore::new(
            self.path.clone(),
            self.busy_timeout,
        )))
    }
}

#[async_trait]
impl ApprovalStore for SqliteJournal {
    async fn park_approval(
        &self,
        approval: &Approval,
        event: AuditEvent,
    ) -> Result<AuditRecord, JournalError> {
        let approval = Box::new(approval.clone());
        self.write_here(|reply| {
            Write::Approval(Box::new(ApprovalWrite::Park(
                approval,
                Box::new(event),
                reply,
            )))
        })
        .await
    }

    async fn approval(&self, id: &ApprovalId) -> Result<Option<Approval>, JournalError> {
        let id = id.clone();
        self.ask(|reply| Read::Approval(id, reply)).await
    }

    async fn approvals(&self, filter: &ApprovalFilter) -> Result<Vec<Approval>, JournalError> {
        let filter = Box::new(filter.clone());
        self.ask(|reply| Read::Approvals(filter, reply)).await
    }

    async fn decide_approval(
        &self,
        id: &ApprovalId,
        decision: &ApprovalDecision,
        event: AuditEvent,
    ) -> Result<Transition, JournalError> {
        let (id, decision) = (id.clone(), Box::new(decision.clone()));
        self.write_here(|reply| {
            Write::Approval(Box::new(ApprovalWrite::Decide(
                id,
                decision,
                Box::new(event),
                reply,
            )))
        })
        .await
    }

    async fn expire_approval(
        &self,
        id: &ApprovalId,
        now_ms: u64,
        event: AuditEvent,
    ) -> Result<Transition, JournalError> {
        let id = id.clone();
        self.write_here(|reply| {
            Write::Approval(Box::new(ApprovalWrite::Expire(
                id,
                now_ms,
                Box::new(event),
                reply,
            )))
        })
        .await
    }

    async fn claim_approval(
        &self,
        id: &ApprovalId,
        owner: &str,
        now_ms: u64,
        lease_ms: u64,
    ) -> Result<Transition, JournalError> {
        let request = Box::new(ClaimRequest {
            id: id.clone(),
            owner: owner.to_owned(),
            now_ms,
            lease_ms,
        });
        self.write_here(|reply| Write::Approval(Box::new(ApprovalWrite::Claim(request, reply))))
            .await
    }

    async fn begin_approved(
        &self,
        id: &ApprovalId,
        claim: &Claim,
        intent: &Intent,
    ) -> Result<(), JournalError> {
        let op = |reply| {
            Write::Approval(Box::new(ApprovalWrite::Begin(
                id.clone(),
                Box::new(claim.clone()),
                Box::new(intent.clone()),
                reply,
            )))
        };
        // A durable intent goes to the journal thread's fsync'd batch, as `write_intent`'s.
        if intent.durable {
            self.ask(op).await
        } else {
            self.write_here(op).await
        }
    }

    async fn settle_approval(
        &self,
        id: &ApprovalId,
        claim: &Claim,
        result: &ActionResult,
        event: AuditEvent,
    ) -> Result<AuditRecord, JournalError> {
        let op = |reply| {
            Write::Approval(Box::new(ApprovalWrite::Settle(
                id.clone(),
                Box::new(claim.clone()),
                Box::new(result.clone()),
                Box::new(event),
                reply,
            )))
        };
        self.write_here(op).await
    }

    /// A watch a thread of this journal wakes when a call was approved, by this process or
    /// another one on the file: it reads `PRAGMA data_version` on a connection of its own
    /// every [`SqliteJournalBuilder::decision_poll`] (5 ms by default) while some watch is
    /// alive, and on a change looks for approved calls it has not seen.
    fn watch_decisions(&self) -> DecisionWatch {
        self.decisions.watch()
    }

    /// Stored in the file's table `remembered_approvals`, on a connection of its own.
    async fn store_remembered(&self, remembered: &RememberedApproval) -> Result<(), JournalError> {
        self.remembered.store(remembered).await
    }

    async fn remembered_approvals(
        &self,
        action: Option<&str>,
    ) -> Result<Vec<RememberedApproval>, JournalError> {
        self.remembered.list(action).await
    }

    /// One `BEGIN IMMEDIATE` transaction: the file's write lock orders racing revocations
    /// across processes.
    async fn revoke_remembered(
        &self,
        id: &RememberedId,
        revocation: &Revocation,
    ) -> Result<Revoked, JournalError> {
        self.remembered.revoke(id, revocation).await
    }
}
