//! A sallyport journal on PostgreSQL: one set of attempts and one hash-chained audit log
//! for every executor process that connects to the same database; and (feature `grants`) a
//! store of OAuth grants the fleet shares, encrypted at rest (`PgGrantStore`).
//!
//! [`PostgresJournal`] implements [`Journal`] with the semantics of the embedded
//! `SqliteJournal` (`sallyport-sqlite`), for several processes at once:
//!
//! * **Durable intents.** A state-changing call's intent is committed (synchronously, so
//!   fsynced by the server) before the executor sends a byte. If the server cannot be
//!   written, the call is refused with `journal_unavailable` and nothing is sent.
//! * **Unique reservations.** The attempt id and the idempotency key are unique across all
//!   processes: a second reservation is [`JournalError::DuplicateKey`].
//! * **One chain.** Every process's appends pass through one chain-head row, so records
//!   get consecutive positions and link up whoever wrote them: a batch either reads the head
//!   locked `FOR UPDATE`, or chains on the head its journal last committed and moves it with
//!   a compare-and-set that rolls the batch back (to be sent again reading the head) if
//!   another process moved it. The hashing and the verification are core's
//!   ([`sallyport_core::journal::chain`]).
//! * **Group commit.** Each journal has writer tasks for intents (two, sharing one queue)
//!   and one for everything else (dispatch notes, records, approval changes): writes made
//!   while a batch commits wait and go out together as a writer's next transaction, so many
//!   concurrent calls share one commit. A batch is sent in at most two flights of pipelined
//!   statements, so it costs one or two round trips, not one per statement: one for a batch
//!   of intents (`BEGIN`, the rows, `COMMIT`), and one for a batch of closes and their
//!   records while no other process appends (the head moved under it sends it again). An intent's synchronous commit never waits
//!   behind records, nor records behind it.
//! * **Leases and fencing.** Each in-flight attempt is leased to its journal's owner name,
//!   renewed by a heartbeat. When a process dies its leases expire, and
//!   [`PostgresJournal::claim_expired`] (a reconciler's first step) takes them over,
//!   raising each one's fencing epoch: the old owner can no longer finish the attempt
//!   ([`JournalError::Fenced`]), so a reclaimed attempt has exactly one outcome.
//! * **Outages leave nothing stuck.** A call's record that cannot be written (the server
//!   went away after the request left) keeps its attempt leased while the executor keeps
//!   the record and writes it again once the server is back; a second close of an attempt
//!   already closed (a commit whose answer was lost with the connection) is refused as
//!   fenced, so an attempt never gets two records. When the executor gives the record up,
//!   [`Journal::release_lease`] ends the lease at once, and the heartbeat stops renewing it.
//!   A record nobody will write again (a cancelled call's, one whose caller stopped
//!   waiting) has its attempt released as soon as its batch fails, and dispatch notes of a
//!   failed batch go out with the next one.
//! * **Failover.** Given a multi-host connection string with
//!   `target_session_attrs=read-write` (`host=db1,db2 … target_session_attrs=read-write`),
//!   every connection the journal makes (its pool: the writers, reads, the lease heartbeat;
//!   and the listening connection) goes to the server that takes writes, so after a standby
//!   is promoted the executors follow it on their own: a write that meets the lost primary
//!   fails as in any outage (an intent refused unsent, a record kept and written again), and
//!   the next connects to the new one. A server that refuses a write as read-only (SQLSTATE
//!   `25006`: a standby, an old primary fenced read-only) has the pool's connections made
//!   before the refusal closed instead of handed out again, and the listening connection
//!   made again at its next check (every 5 s). Use synchronous replication
//!   (`synchronous_standby_names`): with asynchronous replication a promotion loses commits
//!   the primary acknowledged, such as an intent whose request already left or a record
//!   whose receipt the agent holds. The repository README's "High availability" has the
//!   configuration and the measured recovery.
//! * **Audit shards.** Each journal appends to one shard of the audit chain
//!   ([`PostgresJournalBuilder::audit_shard`], default `default`), a chain with a head row
//!   of its own (migration 8): journals on different shards never wait on each other's head
//!   lock, `verify` checks every shard, and one checkpoint signs every shard's head. Records
//!   written before shards are the `default` shard's, with their hashes unchanged.
//! * **A stopped process does not stop the fleet.** A batch holds its shard's head row
//!   lock from its first flight to its `COMMIT`. Each batch's transaction runs with
//!   `idle_in_transaction_session_timeout` (15 s by default,
//!   [`PostgresJournalBuilder::idle_in_transaction_timeout`]), so a process stopped
//!   mid-batch (`SIGSTOP`, a debugger, threads blocked writing to a full pipe) loses its
//!   session and the lock, and the other processes go on recording; its own batch fails
//!   when it wakes, as after any lost connection. Reads (a snapshot may sit idle while a
//!   long chain is checked) and migrations are not limited.
//! * **The approval store.** Parked calls, decisions, expiries, claims and settlements
//!   ([`sallyport_core::approval`]) are rows every process sees; each change is a
//!   compare-and-set on the row locked `FOR UPDATE`, committed in the same transaction as
//!   its audit record, so of two processes deciding one approval only one decision counts.
//!   Each decision also notifies channel `sallyport_approvals` when it commits, and a
//!   journal whose approval worker waits for decisions listens on a connection of its own
//!   (`ApprovalStore::watch_decisions`), so an approved call is sent as soon as it is
//!   decided, whichever process decided it.
//! * **Limits shared by the fleet.** The policy's call counts
//!   ([`sallyport_core::policy::calls`]) are rows every process sees: deciding a call holds a
//!   transaction-scoped advisory lock on its session, so 4 processes allow what the policy
//!   allows once, not 4 times (`Journal::call_store`; the executor takes it by default).
//! * **No passwords in errors.** Every PostgreSQL failure becomes a [`PostgresError`]
//!   whose message has the connection's password taken out; the journal's `Debug` shows
//!   the connection target without it.
//!
//! The schema (tables prefixed `sallyport_`, so it can live in a database the application
//! already uses) is created and upgraded by embedded, versioned migrations
//! ([`SCHEMA_VERSION`]) when a journal connects; a database migrated by a newer build is
//! refused with [`JournalError::NewerFormat`].
//!
//! # OAuth grants for the fleet (feature `grants`)
//!
//! `PgGrantStore` keeps the OAuth grants of per-user (and shared) credentials in
//! `sallyport_grants`, so every process of a fleet reads the current token and one process
//! refreshes each grant while the others wait and read what it stored:
//!
//! * **Envelope encryption.** Each row's tokens are sealed (XChaCha20-Poly1305) under a data
//!   key of its own, which the key-encryption key (`GrantKek`, 32 bytes the vault holds)
//!   wraps; both boxes are bound to the row's credential, subject and version, so a row
//!   copied to another subject or rolled back does not open. The table alone reveals
//!   nothing; `list` reads only the columns beside the boxes (scopes, expiry, whether a
//!   refresh token is held, why the account must be connected again).
//! * **Compare-and-set.** `replace` is one `UPDATE … WHERE version = $expected` (or an
//!   `INSERT … ON CONFLICT DO NOTHING` for a new grant): a stale writer stores nothing and
//!   gets the grant as it is now.
//! * **One refresh at a time.** `hold_refresh` holds a transaction-scoped advisory lock on
//!   the grant for the length of a refresh, let go when the hold drops and by the server
//!   when the process dies.
//!   Another refresh of the grant waits for it at most `refresh_wait` (60 s by default), then
//!   is refused with nothing sent: a holder stopped mid-refresh keeps the lock, since
//!   handing it on could let two processes present one refresh token.
//! * **Key rotation.** `PgGrantStore::rotate_key` re-wraps every row's data key under a
//!   new key in one transaction; a row under a key a store does not hold is a clear error
//!   naming the key id, never garbage.
//!
//! Give it to the vault that keeps the client secrets (`MemoryVault::with_grant_store`,
//! `FileVault::with_grant_store`): the HTTP channel refreshes through it unchanged, and the
//! vault's scrubber knows every token read from it.
//!
//! ```no_run
//! use std::sync::Arc;
//! use sallyport_core::vault::{GrantStore, MemoryVault};
//! use sallyport_postgres::{GrantKek, PgGrantStore};
//!
//! # async fn demo(vault: MemoryVault) -> Result<(), Box<dyn std::error::Error>> {
//! let key = GrantKek::from_vault(&vault, "grants-key").await?;
//! let grants = PgGrantStore::builder("postgres://app@db.internal/app", key).connect().await?;
//! let vault = vault.with_grant_store(Arc::new(grants) as Arc<dyn GrantStore>);
//! # let _ = vault; Ok(()) }
//! ```
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use sallyport_core::journal::Journal;
//! use sallyport_postgres::PostgresJournal;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let journal = PostgresJournal::builder("postgres://sallyport:secret@db.internal/sallyport")
//!     .owner("worker-1")
//!     .lease(Duration::from_secs(30))
//!     .connect()
//!     .await?;
//! // Hand it to the executor (`Executor::builder().journal(journal)`), or read it:
//! let report = journal.verify().await?;
//! assert!(report.is_intact());
//! // A reconciler takes over what dead processes left in flight:
//! for claimed in journal.claim_expired(100).await? {
//!     println!("{} was {}'s", claimed.attempt.attempt_id, claimed.previous_owner);
//! }
//! # Ok(()) }
//! ```
//!
//! # TLS
//!
//! With the `tls` feature, `PostgresJournalBuilder::tls` takes a rustls `ClientConfig`
//! (ring provider) and every connection is encrypted. Without it, connections are in the
//! clear: use a Unix socket or a trusted network.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod anchors;
mod approvals;
mod builder;
mod calls;
mod error;
#[cfg(feature = "grants")]
mod grants;
mod lease;
mod listen;
mod reads;
mod remembered;
mod schema;
mod shared;
mod sql;
mod writer;

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use sallyport_core::approval::{
    Approval, ApprovalDecision, ApprovalFilter, ApprovalId, Claim, RememberedApproval,
    RememberedId, Revocation, Revoked, Transition,
};
use sallyport_core::journal::chain::ChainRow;
use sallyport_core::journal::checkpoint::Checkpoint;
use sallyport_core::journal::retention::Anchor;
use sallyport_core::journal::{
    ApprovalStore, AttemptId, AuditEvent, AuditRecord, DecisionWatch, HeadVerifyingKey, Intent,
    Journal, JournalError, SignedHead, UnresolvedAttempt, VerifyReport,
};
use sallyport_core::outcome::ActionResult;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

pub use crate::builder::PostgresJournalBuilder;
pub use crate::error::PostgresError;
#[cfg(feature = "grants")]
#[cfg_attr(docsrs, doc(cfg(feature = "grants")))]
pub use crate::grants::{GrantKek, PgGrantStore, PgGrantStoreBuilder};
pub use crate::lease::ClaimedAttempt;
pub use crate::schema::SCHEMA_VERSION;
use crate::shared::Shared;
pub use crate::writer::MAX_BATCH;
use sallyport_core::journal::batch::{ApprovalWrite, ClaimRequest, Reply, Write};

/// The journal on PostgreSQL. Cheap to share behind an `Arc`; dropping it lets the writers
/// finish what is queued and stops the heartbeat.
pub struct PostgresJournal {
    shared: Arc<Shared>,
    /// The workers' watches on decisions, and the connection that listens for them.
    listener: Arc<listen::Listener>,
    /// Intents, to the writer that commits nothing else (see `writer/mod.rs`).
    intents: mpsc::UnboundedSender<Write>,
    /// Every other write, to the writer that appends to the chain.
    records: mpsc::UnboundedSender<Write>,
    heartbeat: JoinHandle<()>,
}

impl fmt::Debug for PostgresJournal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresJournal")
            .field("target", &self.shared.target)
            .field("owner", &self.shared.owner)
            .field("lease", &self.shared.lease)
            .finish_non_exhaustive()
    }
}

impl Drop for PostgresJournal {
    fn drop(&mut self) {
        self.heartbeat.abort();
        self.listener.stop();
    }
}

impl PostgresJournal {
    /// A builder for the journal in the database `url` names: a `postgres://` URL or a
    /// libpq key-value string (`host=/var/run/postgresql user=app dbname=app`).
    pub fn builder(url: &str) -> PostgresJournalBuilder {
        PostgresJournalBuilder::new(url)
    }

    /// Connects to `url` with default settings.
    ///
    /// # Errors
    ///
    /// See [`PostgresJournalBuilder::connect`].
    pub async fn connect(url: &str) -> Result<Self, JournalError> {
        Self::builder(url).connect().await
    }

    /// The lease owner this journal writes.
    pub fn owner(&self) -> &str {
        &self.shared.owner
    }

    /// Takes over up to `limit` unresolved attempts (no audit record closes them) whose
    /// lease has expired, oldest first: this journal becomes their owner with a fresh lease,
    /// and their fencing epoch is raised, so their previous owner's append or dispatch note
    /// is refused from now on. This journal may then close them with
    /// [`Journal::append`]. Attempts another journal is claiming at the same moment are
    /// skipped, never claimed twice.
    ///
    /// # Errors
    ///
    /// [`JournalError::Write`] when the server cannot be written.
    pub async fn claim_expired(&self, limit: usize) -> Result<Vec<ClaimedAttempt>, JournalError> {
        lease::claim_expired(&self.shared, limit).await
    }

    /// Renews the leases of the attempts this journal holds now, as the heartbeat does
    /// on its own; returns how many it renewed.
    ///
    /// # Errors
    ///
    /// [`JournalError::Write`] when the server cannot be written.
    pub async fn renew_leases(&self) -> Result<u64, JournalError> {
        lease::renew(&self.shared).await
    }

    fn send(&self, op: Write) -> Result<(), JournalError> {
        match op {
            Write::Intent(ref intent, _) => {
                let attempt = intent.attempt_id.as_str().to_owned();
                self.shared.intent_queued(&attempt);
                self.intents.send(op).map_err(|_| {
                    self.shared.intents_answered([attempt.as_str()]);
                    JournalError::Stopped
                })
            }
            _ => self.records.send(op).map_err(|_| JournalError::Stopped),
        }
    }

    async fn ask<T>(&self, make: impl FnOnce(Reply<T>) -> Write) -> Result<T, JournalError> {
        let (reply, answer) = oneshot::channel();
        self.send(make(reply))?;
        answer.await.map_err(|_| JournalError::Stopped)?
    }
}

#[async_trait]
impl Journal for PostgresJournal {
    async fn write_intent(&self, intent: &Intent) -> Result<(), JournalError> {
        let intent = Box::new(intent.clone());
        self.ask(|reply| Write::Intent(intent, reply)).await
    }

    fn note_dispatch(&self, attempt: &AttemptId, n: u32) {
        // A stopped writer has nothing left to note it in; the append reports it.
        let _ = self.send(Write::Dispatch(attempt.clone(), n));
    }

    async fn append(&self, event: AuditEvent) -> Result<AuditRecord, JournalError> {
        self.ask(|reply| Write::Append(Box::new(event), Some(reply)))
            .await
    }

    async fn append_with_intent(
        &self,
        intent: Intent,
        event: AuditEvent,
    ) -> Result<AuditRecord, JournalError> {
        let intent = Box::new(intent);
        self.ask(|reply| Write::Observe(intent, Box::new(event), reply))
            .await
    }

    fn append_detached(&self, event: AuditEvent) {
        if self.send(Write::Append(Box::new(event), None)).is_err() {
            tracing::error!("detached audit append dropped: the journal writer stopped");
        }
    }

    fn release_lease(&self, attempt: &AttemptId) {
        // Not renewed from now on: the lease runs out by itself even if the server cannot
        // be told now.
        let Some(epoch) = self.shared.release(attempt.as_str()) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (shared, attempt) = (Arc::clone(&self.shared), attempt.clone());
        runtime.spawn(async move {
            match lease::release(&shared, attempt.as_str(), epoch).await {
                Ok(_) => tracing::info!(attempt = %attempt, "lease released for the reconciler"),
                Err(e) => {
                    tracing::warn!(attempt = %attempt, error = %e, "lease release not written; the lease runs out by itself");
                }
            }
        });
    }

    async fn verify(&self) -> Result<VerifyReport, JournalError> {
        reads::verify(&self.shared).await
    }

    async fn signed_heads(&self) -> Result<Vec<SignedHead>, JournalError> {
        reads::signed_heads(&self.shared).await
    }

    async fn verify_signed(&self, key: &HeadVerifyingKey) -> Result<VerifyReport, JournalError> {
        reads::verify_signed(&self.shared, key).await
    }

    async fn records(&self) -> Result<Vec<AuditRecord>, JournalError> {
        reads::records(&self.shared).await
    }

    /// The `sallyport_audit` rows, the event JSON as stored.
    async fn chain_rows(&self) -> Result<Vec<ChainRow>, JournalError> {
        reads::rows(&self.shared).await
    }

    async fn checkpoints(&self) -> Result<Vec<Checkpoint>, JournalError> {
        reads::checkpoints(&self.shared).await
    }

    async fn anchors(&self) -> Result<Vec<Anchor>, JournalError> {
        reads::anchors(&self.shared).await
    }

    /// In one transaction that holds the shard's head row (appends to the shard wait; other
    /// shards go on), any shard of the database.
    async fn prune_sealed(&self, anchor: &Anchor) -> Result<u64, JournalError> {
        anchors::prune(&self.shared, anchor).await
    }

    /// Stored in `sallyport_checkpoints` (migration 7).
    async fn store_checkpoint(&self, checkpoint: &Checkpoint) -> Result<(), JournalError> {
        reads::store_checkpoint(&self.shared, checkpoint).await
    }

    async fn unresolved(&self) -> Result<Vec<UnresolvedAttempt>, JournalError> {
        reads::unresolved(&self.shared).await
    }

    async fn settle_unresolved(
        &self,
        attempt: &AttemptId,
        event: AuditEvent,
    ) -> Result<bool, JournalError> {
        if event.attempt_id != *attempt {
            return Ok(false);
        }
        let attempt = attempt.clone();
        self.ask(|reply| Write::SettleUnresolved(attempt, Box::new(event), reply))
            .await
    }

    fn approval_store(self: Arc<Self>) -> Option<Arc<dyn ApprovalStore>> {
        Some(self)
    }

    /// The policy's call counts in this database (`sallyport_policy_calls`), shared by every
    /// executor process on it: deciding holds an advisory lock on the session, so a limit
    /// holds across them.
    fn call_store(self: Arc<Self>) -> Option<Arc<dyn sallyport_core::policy::calls::CallStore>> {
        Some(Arc::new(calls::PgCallStore::new(Arc::clone(&self.shared))))
    }
}

#[async_trait]
impl ApprovalStore for PostgresJournal {
    async fn park_approval(
        &self,
        approval: &Approval,
        event: AuditEvent,
    ) -> Result<AuditRecord, JournalError> {
        let approval = Box::new(approval.clone());
        self.ask(|reply| {
            Write::Approval(Box::new(ApprovalWrite::Park(
                approval,
                Box::new(event),
                reply,
            )))
        })
        .await
    }

    async fn approval(&self, id: &ApprovalId) -> Result<Option<Approval>, JournalError> {
        approvals::approval(&self.shared, id).await
    }

    async fn approvals(&self, filter: &ApprovalFilter) -> Result<Vec<Approval>, JournalError> {
        approvals::approvals(&self.shared, filter).await
    }

    async fn decide_approval(
        &self,
        id: &ApprovalId,
        decision: &ApprovalDecision,
        event: AuditEvent,
    ) -> Result<Transition, JournalError> {
        let (id, decision) = (id.clone(), Box::new(decision.clone()));
        self.ask(|reply| {
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
        self.ask(|reply| {
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
        let (id, owner) = (id.clone(), owner.to_owned());
        self.ask(|reply| {
            Write::Approval(Box::new(ApprovalWrite::Claim(
                Box::new(ClaimRequest {
                    id,
                    owner,
                    now_ms,
                    lease_ms,
                }),
                reply,
            )))
        })
        .await
    }

    async fn begin_approved(
        &self,
        id: &ApprovalId,
        claim: &Claim,
        intent: &Intent,
    ) -> Result<(), JournalError> {
        let (id, claim, intent) = (
            id.clone(),
            Box::new(claim.clone()),
            Box::new(intent.clone()),
        );
        self.ask(|reply| Write::Approval(Box::new(ApprovalWrite::Begin(id, claim, intent, reply))))
            .await
    }

    async fn settle_approval(
        &self,
        id: &ApprovalId,
        claim: &Claim,
        result: &ActionResult,
        event: AuditEvent,
    ) -> Result<AuditRecord, JournalError> {
        let (id, claim, result) = (
            id.clone(),
            Box::new(claim.clone()),
            Box::new(result.clone()),
        );
        self.ask(|reply| {
            Write::Approval(Box::new(ApprovalWrite::Settle(
                id,
                claim,
                result,
                Box::new(event),
                reply,
            )))
        })
        .await
    }

    /// A watch woken when a decision commits, by this process or another one on the
    /// database: each decision's transaction notifies channel `sallyport_approvals`, and
    /// while some watch is alive the journal listens on a connection of its own (outside
    /// the pool, `application_name` `sallyport-approval-listener`). A lost connection is
    /// made again, and the watches are then woken so that nothing decided meanwhile is
    /// missed. Outside a tokio runtime the watch never wakes.
    fn watch_decisions(&self) -> DecisionWatch {
        self.listener.watch()
    }

    /// Stored in `sallyport_remembered_approvals` (migration 6), shared by every process
    /// on the database.
    async fn store_remembered(&self, remembered: &RememberedApproval) -> Result<(), JournalError> {
        remembered::PgRemembered::new(Arc::clone(&self.shared))
            .store(remembered)
            .await
    }

    async fn remembered_approvals(
        &self,
        action: Option<&str>,
    ) -> Result<Vec<RememberedApproval>, JournalError> {
        remembered::PgRemembered::new(Arc::clone(&self.shared))
            .list(action)
            .await
    }

    /// A compare-and-set in one statement (`WHERE NOT revoked`): of racing revocations on
    /// any processes, one applies.
    async fn revoke_remembered(
        &self,
        id: &RememberedId,
        revocation: &Revocation,
    ) -> Result<Revoked, JournalError> {
        remembered::PgRemembered::new(Arc::clone(&self.shared))
            .revoke(id, revocation)
            .await
    }
}
