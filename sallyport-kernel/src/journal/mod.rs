//! Durable attempt records and the hash-chained audit log.
//!
//! Every call that reaches stage 9 writes an [`Intent`] before anything is sent; every call,
//! refused or not, ends with exactly one [`AuditEvent`] appended to a hash chain. The default
//! `SqliteJournal` (crate `sallyport-sqlite`, re-exported by `sallyport-core`) keeps both in one SQLite file and batches concurrent writes into one
//! transaction, so concurrent calls share fsyncs instead of queueing behind them.
//!
//! The chain proves that records link up; it does not stop someone who can write the file
//! from rebuilding it after an edit. Give the journal a [`HeadSigningKey`] and every batch
//! that appends also stores an Ed25519 signature over the new head; [`Journal::verify_signed`]
//! checks them with the [`HeadVerifyingKey`] alone ([`signing`]). Attempt rows are checked
//! against the records that close them, so an edited phase or status is reported by
//! [`Journal::verify`], and [`Journal::unresolved`] lists every attempt no record closes.
//!
//! # Writing a backend
//!
//! A [`Journal`] stores attempt rows and one audit chain. The hashing and the verification
//! are not the backend's: it reads its rows as plain values and hands them to
//! [`chain::ChainCheck`], and it signs heads with [`HeadSigningKey::sign`]. What a backend
//! must guarantee:
//!
//! * **Durable intents are durable.** [`Journal::write_intent`] with [`Intent::durable`]
//!   returns only once the intent would survive a crash or power loss (the executor sends
//!   the request right after). A non-durable intent may be lost in a crash.
//! * **One chain per shard.** Every appended record gets the next sequence number of its
//!   shard and links to the shard's record before it (the first to
//!   [`chain::shard_genesis`]), also with several writers (threads or processes) on one
//!   store: two records of a shard never share a position. A backend without shards keeps
//!   one chain, the default shard's ([`checkpoint::DEFAULT_SHARD`]), and reads its rows back
//!   with [`chain::ChainRow::new`]; one with shards stores each row's shard beside it and
//!   reads it back with [`chain::ChainRow::in_shard`]. Record JSON is stored byte for byte
//!   as hashed.
//! * **Atomic observe records.** [`Journal::append_with_intent`] stores the closed attempt
//!   row and its record together or not at all.
//! * **Closing attempts.** An append sets the attempt's phase ([`Phase::as_str`]), status
//!   and dispatch count from its event, in the same transaction as the record.
//! * **Pruning, if offered.** [`Journal::prune_sealed`] checks the anchor with
//!   [`retention::plan_prune`] and deletes in one transaction that no append to the shard
//!   runs beside; [`Journal::anchors`] is read in the same snapshot as the chain by
//!   `verify` and `verify_signed` ([`chain::ChainCheck::with_anchors`]), and the next
//!   record after a prune that left no record follows the anchor, not the genesis.
//! * **Errors carry no backend types.** A backend's own error goes into [`JournalError`] as
//!   a boxed source ([`BackendError`]).
//!
//! A backend that also keeps approvals (deferred consent) implements [`ApprovalStore`],
//! whose docs list what it adds, and overrides [`Journal::approval_store`] to say so.

mod attempts;
#[doc(hidden)]
pub mod batch;
pub mod chain;
pub mod checkpoint;
mod decisions;
mod memory;
pub mod merkle;
pub mod retention;
pub mod signing;

pub(crate) use crate::clock::now;

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use self::chain::{GENESIS_HASH, chain_hash};
pub use self::decisions::{DecisionSignal, DecisionWatch};
pub use self::memory::MemoryJournal;
pub use self::signing::{HeadSigningKey, HeadVerifyingKey, KeyError, SignedHead};
use crate::action::{EffectClass, ScopedValue};
use crate::outcome::{Origin, Status};
use sallyport_vocab::approval::{
    Approval, ApprovalDecision, ApprovalFilter, ApprovalId, Claim, RememberedApproval,
    RememberedId, Revocation, Revoked, Transition,
};
pub use sallyport_vocab::journal::{
    AttemptId, BackendError, IdempotencyKey, JournalError, Phase, ReceiptId,
};
use sallyport_vocab::string_enum;

/// The durable record written before the first byte is sent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Intent {
    /// The attempt.
    pub attempt_id: AttemptId,
    /// The action name.
    pub action: String,
    /// The session.
    pub session_id: String,
    /// The executor-generated idempotency key.
    pub idempotency_key: IdempotencyKey,
    /// SHA-256 over the action, its definition hash and the canonical arguments.
    pub fingerprint: String,
    /// The action's definition hash.
    pub definition_hash: String,
    /// The effect class.
    pub effect: EffectClass,
    /// The arguments (for reconcile after a crash). Free-text notes included; no secrets.
    pub arguments: Value,
    /// Whether the write must be fsynced before returning (state-changing actions).
    pub durable: bool,
}

impl Intent {
    #[doc(hidden)]
    /// A synthetic intent for benchmarks of journal implementations.
    pub fn for_bench(durable: bool) -> Self {
        Self {
            attempt_id: AttemptId::generate(),
            action: "bench".to_owned(),
            session_id: "bench".to_owned(),
            idempotency_key: IdempotencyKey::generate(),
            fingerprint: "0".repeat(64),
            definition_hash: "0".repeat(64),
            effect: if durable {
                EffectClass::ExternalCommitment
            } else {
                EffectClass::Observe
            },
            arguments: serde_json::json!({"id": "x"}),
            durable,
        }
    }
}

/// One audit record: the outcome of one call, refused or not.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AuditEvent {
    /// The receipt id returned to the agent.
    pub receipt_id: ReceiptId,
    /// The attempt.
    pub attempt_id: AttemptId,
    /// RFC 3339 time the record was made.
    pub at: String,
    /// The session.
    pub session_id: String,
    /// The end user the session acted for (`Session::for_subject`), when the host named
    /// one. Absent otherwise, so records of sessions without a subject keep their JSON and
    /// hashes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The action name as called.
    pub action: String,
    /// The live definition hash, when the action resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition_hash: Option<String>,
    /// The final phase (`refused`, `finished`, `cancelled_before_send`, `cancelled_unknown`).
    pub phase: Phase,
    /// The status the agent got.
    pub status: Status,
    /// Who decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
    /// The code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<crate::code::Code>,
    /// The reason (scrubbed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The objects the call named.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<ScopedValue>,
    /// The agent's audit note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The channel's summary of the request (method + path, host + argv).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// The consent decision, when one was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consent: Option<crate::code::ConsentOutcome>,
    /// Payload drift divergences seen (warn and shadow modes record them here).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub divergences: Vec<sallyport_vocab::drift::Divergence>,
    /// The definition drift decision behind a `definition_drift` or `review_required`
    /// refusal; its `receipt_id` is this record's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift_decision: Option<Box<sallyport_vocab::drift::DriftDecision>>,
    /// How many requests the channel handed to the transport.
    pub dispatches: u32,
    /// The upstream's status (HTTP status or exit code), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_status: Option<i64>,
    /// The approval this record is a step of (requested, decided, expired, resumed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<sallyport_vocab::approval::ApprovalNote>,
    /// The evidence behind this record when the reconciler settled an unresolved attempt
    /// (see [`crate::Executor::reconcile`]): the read-only check it ran and its receipt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconciled: Option<ReconcileNote>,
    /// The host policy's decision on this call (`policy: {name, decision, reason, rules}`),
    /// when the executor has a [`Policy`](crate::policy::Policy) and the call reached it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<sallyport_vocab::policy::PolicyNote>,
    /// What the filter stage found in the upstream's answer (credential-shaped values,
    /// instruction-shaped text): the rule, the JSON pointer and what was done, never the
    /// value. Absent when nothing was found, so earlier records keep their JSON and hashes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<sallyport_vocab::finding::Finding>,
    /// What a candidate policy run in shadow would have decided about this call (`shadow:
    /// {name, decision, reason, rules, flip}`), when the executor has one and the enforced
    /// policy was asked. Absent otherwise, so earlier records keep their JSON and hashes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<sallyport_vocab::policy::ShadowNote>,
    /// What the host's own hooks did to this call (see [`crate::hooks`]): each hook's name,
    /// stage, outcome and reason, in the order they ran. Absent when no hook ran, so records
    /// of executors without hooks keep their JSON and hashes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<sallyport_vocab::hook::HookNote>,
}

/// How the reconciler settled an attempt its owner left unresolved: the reconcile action it
/// ran (an observe call with its own audit record) and that record's receipt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ReconcileNote {
    /// The reconcile action run as the check (`get_invoice`).
    pub action: String,
    /// The receipt of the check's own audit record: the evidence.
    pub evidence: ReceiptId,
    /// The status the check answered (`completed`, `already_in_desired_state`, `rejected`).
    pub check_status: Status,
}

impl ReconcileNote {
    /// A note naming the check `action`, its receipt and the status it answered.
    pub fn new(action: impl Into<String>, evidence: ReceiptId, check_status: Status) -> Self {
        Self {
            action: action.into(),
            evidence,
            check_status,
        }
    }
}

impl AuditEvent {
    #[doc(hidden)]
    /// A synthetic record closing `intent` as finished and completed after one request, for
    /// benchmarks and tests of journal implementations.
    pub fn for_bench(intent: &Intent) -> Self {
        Self {
            receipt_id: ReceiptId::generate(),
            attempt_id: intent.attempt_id.clone(),
            at: now(),
            session_id: intent.session_id.clone(),
            subject: None,
            action: intent.action.clone(),
            definition_hash: Some(intent.definition_hash.clone()),
            phase: Phase::Finished,
            status: Status::Completed,
            origin: None,
            code: None,
            reason: None,
            objects: Vec::new(),
            note: None,
            request: None,
            consent: None,
            divergences: Vec::new(),
            drift_decision: None,
            dispatches: 1,
            upstream_status: None,
            approval: None,
            reconciled: None,
            policy: None,
            findings: Vec::new(),
            shadow: None,
            hooks: Vec::new(),
        }
    }
}

/// A stored audit record with its chain links.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// The shard whose chain holds the record ([`checkpoint::DEFAULT_SHARD`] unless the
    /// journal was given one; absent from the JSON then, so records exported before shards
    /// read the same).
    #[serde(default = "default_shard", skip_serializing_if = "is_default_shard")]
    pub shard: String,
    /// Position in its shard's chain, from 1.
    pub seq: u64,
    /// The previous record's hash (the shard's genesis for the first: 64 zeros in the
    /// default shard, see [`chain::shard_genesis`]).
    pub prev_hash: String,
    /// SHA-256 of `prev_hash`, `seq` and the event JSON.
    pub hash: String,
    /// The event.
    pub event: AuditEvent,
}

/// The name of the default shard, for serde.
fn default_shard() -> String {
    checkpoint::DEFAULT_SHARD.to_owned()
}

/// Whether `shard` is the default shard, for serde.
fn is_default_shard(shard: &str) -> bool {
    shard == checkpoint::DEFAULT_SHARD
}

/// The head of the chain: export it somewhere else to detect truncation later.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainHead {
    /// How many records the chain holds.
    pub count: u64,
    /// The last record's hash (64 zeros when empty).
    pub hash: String,
}

string_enum! {
    /// What kind of damage `verify` found.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum BreakKind {
        /// A record's content no longer matches its hash.
        Edited => "edited",
        /// Records are missing (a gap in the sequence, or the chain is shorter than an exported head).
        Deleted => "deleted",
        /// A record was added that does not link to its predecessor.
        Inserted => "inserted",
        /// Records are out of order.
        Reordered => "reordered",
        /// A record cannot be read.
        Malformed => "malformed",
        /// The chain does not match the exported head it was compared with, or a record no longer
        /// matches the head signed at its position.
        HeadMismatch => "head_mismatch",
        /// A stored head names the verifying key but its signature does not verify.
        BadSignature => "bad_signature",
        /// Records that no head signed by the verifying key covers (only with a key).
        Unsigned => "unsigned",
        /// An attempt row disagrees with the audit chain: its phase or status was changed, or it
        /// claims an outcome no audit record gives.
        AttemptEdited => "attempt_edited",
    }
}

/// The first broken link `verify` found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainBreak {
    /// The sequence number where the chain breaks (for an attempt row no audit record
    /// closes, 0).
    pub seq: u64,
    /// What it looks like.
    pub kind: BreakKind,
    /// A sentence for a human.
    pub detail: String,
    /// The attempt whose row disagrees with the chain ([`BreakKind::AttemptEdited`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<AttemptId>,
    /// The shard the break is in, when it is not the default shard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<String>,
}

/// One shard of the audit chain as `verify` found it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ShardReport {
    /// The shard's name.
    pub shard: String,
    /// The shard's head as found (its record count and last hash).
    pub head: ChainHead,
    /// The shard's first break, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_break: Option<ChainBreak>,
    /// The last position of the shard covered by a signature of the verifying key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_signed: Option<u64>,
}

/// The answer of `verify`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyReport {
    /// Records checked, in every shard.
    pub records: u64,
    /// The default shard's head as found (the whole chain's, for a journal without shards).
    pub head: ChainHead,
    /// The first break, if any.
    pub first_break: Option<ChainBreak>,
    /// The last position covered by a head signed with the key given to
    /// [`Journal::verify_signed`] in the default shard; `None` without a key, or when no
    /// head verifies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_signed: Option<u64>,
    /// Every shard, the default one first, when the journal holds records of a shard other
    /// than the default (empty otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<ShardReport>,
}

impl VerifyReport {
    /// Whether the chain is intact.
    pub fn is_intact(&self) -> bool {
        self.first_break.is_none()
    }

    /// Compares with a head exported earlier: a chain that is now shorter, or whose record at
    /// that position has another hash, was truncated or rewritten.
    pub fn check_against(&mut self, exported: &ChainHead, hash_at_count: Option<&str>) {
        if self.first_break.is_some() {
            return;
        }
        if self.head.count < exported.count {
            self.first_break = Some(ChainBreak {
                seq: self.head.count + 1,
                kind: BreakKind::Deleted,
                detail: format!(
                    "chain holds {} records but the exported head says {}: truncated",
                    self.head.count, exported.count
                ),
                attempt: None,
                shard: None,
            });
        } else if hash_at_count != Some(exported.hash.as_str()) {
            self.first_break = Some(ChainBreak {
                seq: exported.count,
                kind: BreakKind::HeadMismatch,
                detail: format!("record {} does not match the exported head", exported.count),
                attempt: None,
                shard: None,
            });
        }
    }
}

/// An attempt left between intent and outcome (after a crash): an attempt no audit record
/// closes. What the chain says decides, not the attempt row's own `phase` column, so editing
/// that column does not hide an attempt from this list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UnresolvedAttempt {
    /// The attempt.
    pub attempt_id: AttemptId,
    /// The action.
    pub action: String,
    /// The session.
    pub session_id: String,
    /// The idempotency key.
    pub idempotency_key: IdempotencyKey,
    /// The phase it stopped in: `intent_written`, or `dispatched` whenever the row does not
    /// say `intent_written` (a row claiming an outcome no record gives may have been sent).
    pub phase: Phase,
    /// Requests handed to the transport.
    pub dispatches: u32,
    /// The arguments, for the reconcile action.
    pub arguments: Value,
    /// When the intent was written (RFC 3339).
    pub created_at: String,
    /// The executor that holds the attempt, on a backend with leases (PostgreSQL); `None`
    /// where the backend keeps no owner (SQLite).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Until when (Unix milliseconds) the owner's lease on the attempt lasts; past it the
    /// owner is taken to be gone. `None` without lease information (SQLite): the reconciler
    /// then goes by the attempt's age.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_until_ms: Option<u64>,
}

/// Durable attempt records and the audit chain.
///
/// # A call's last record is handed over on the first poll
///
/// [`Journal::append`] and [`Journal::append_with_intent`] (and
/// [`ApprovalStore::park_approval`] and [`ApprovalStore::settle_approval`]) write a call's
/// last record. Once the future of one of them
/// has been polled, the write must be carried out even if the future is then dropped (both
/// built-in backends queue it for a writer on that first poll). The executor relies on it:
/// a call whose future is dropped after its last record was handed over is not recorded
/// again as cancelled, so every call has exactly one record. A write dropped before its
/// first poll was never handed over, and the call's cancellation is recorded instead.
#[async_trait]
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a sallyport journal",
    note = "use `SqliteJournal::open(path)`, or implement `sallyport_core::journal::Journal`"
)]
pub trait Journal: Send + Sync + 'static {
    /// Writes the intent; when `intent.durable`, returns only after it is on stable storage.
    ///
    /// # Errors
    ///
    /// Any failure: the executor then sends nothing.
    async fn write_intent(&self, intent: &Intent) -> Result<(), JournalError>;

    /// Notes that request number `n` of the attempt is being handed to the transport. Not
    /// awaited: ordered with the other writes of this journal.
    fn note_dispatch(&self, attempt: &AttemptId, n: u32);

    /// Appends the audit event and closes the attempt.
    ///
    /// After an error, an attempt this journal holds a lease on stays leased to it: the
    /// caller may append the record again (the executor keeps a call's last record and does,
    /// see [`ActionResult::record_pending`](crate::outcome::ActionResult::record_pending)),
    /// or give the attempt up with [`Journal::release_lease`]. A backend that cannot tell
    /// whether a failed write was committed refuses the second close of an attempt it holds
    /// ([`JournalError::Fenced`]) rather than appending a second record for it.
    ///
    /// # Errors
    ///
    /// When the record cannot be written.
    async fn append(&self, event: AuditEvent) -> Result<AuditRecord, JournalError>;

    /// Gives up this journal's lease on `attempt`, whose last record it could not write and
    /// will not try again: the attempt is no longer renewed, and where the backend can still
    /// reach its store the lease is ended at once, so a reconciler may settle the attempt
    /// (through the action's read-only check) without waiting for the lease to run out. Not
    /// awaited. The default does nothing: a journal without leases (the SQLite and memory
    /// journals) leaves an unresolved attempt to the reconciler's age rule.
    fn release_lease(&self, attempt: &AttemptId) {
        let _ = attempt;
    }

    /// Writes the attempt row of `intent`, already closed with `event`'s phase, status and
    /// dispatch count, and appends `event`, in one transaction: after an error neither is
    /// stored. Used for observe calls, which have no side effect to reconcile and so are
    /// journaled once, after the response.
    ///
    /// The default writes the intent, then appends (two commits, not atomic, and a future
    /// dropped between them leaves the attempt open with no record); a backend should
    /// override it.
    ///
    /// # Errors
    ///
    /// [`JournalError::DuplicateKey`] when the attempt or its key is already recorded; any
    /// other failure to write. The executor then withholds the data.
    async fn append_with_intent(
        &self,
        intent: Intent,
        event: AuditEvent,
    ) -> Result<AuditRecord, JournalError> {
        self.write_intent(&intent).await?;
        self.append(event).await
    }

    /// Appends without waiting (used when a call's future is dropped).
    fn append_detached(&self, event: AuditEvent);

    /// Checks the whole chain, and the attempt rows against it, and reports the first broken
    /// link.
    ///
    /// # Errors
    ///
    /// When the journal cannot be read.
    async fn verify(&self) -> Result<VerifyReport, JournalError>;

    /// The signed chain heads the journal holds, oldest first (none by default).
    ///
    /// # Errors
    ///
    /// When the journal cannot be read.
    async fn signed_heads(&self) -> Result<Vec<SignedHead>, JournalError> {
        Ok(Vec::new())
    }

    /// [`Journal::verify`], then the signed heads checked with `key` (see
    /// [`signing::check_signed_heads`]): reports the last signed position and treats records
    /// after it as unsigned. A journal with no heads signed by `key` is reported, never passed.
    ///
    /// The default reads heads, chain and records one after another; a backend whose
    /// writers may append in between should override it with one consistent read.
    ///
    /// # Errors
    ///
    /// When the journal cannot be read.
    async fn verify_signed(&self, key: &HeadVerifyingKey) -> Result<VerifyReport, JournalError> {
        let heads = self.signed_heads().await?;
        let report = self.verify().await?;
        let rows = match self.chain_rows().await {
            Ok(rows) => rows,
            // A record that cannot be read is already the reported break.
            Err(_) if report.first_break.is_some() => return Ok(report),
            Err(e) => return Err(e),
        };
        let checkpoints = self.checkpoints().await?;
        let anchors = self.anchors().await?;
        let mut check = chain::ChainCheck::with_anchors(anchors, rows);
        check.check_signed(&heads, &checkpoints, key);
        let mut signed = check.into_report();
        if report.first_break.is_some() {
            // The break `verify` found (an attempt row, say) comes first.
            signed.first_break = report.first_break;
        }
        Ok(signed)
    }

    /// Every audit row as stored (the event JSON byte for byte as hashed), oldest first:
    /// what inclusion proofs are made of ([`checkpoint::InclusionProof::build`]).
    ///
    /// The default writes each record of [`Journal::records`] back to JSON, which gives the
    /// stored bytes only when the backend stored them that way; a backend that keeps the
    /// JSON as text should return it as read.
    ///
    /// # Errors
    ///
    /// When the journal cannot be read.
    async fn chain_rows(&self) -> Result<Vec<chain::ChainRow>, JournalError> {
        self.records()
            .await?
            .into_iter()
            .map(|r| {
                let json =
                    serde_json::to_string(&r.event).map_err(|e| JournalError::Read(Box::new(e)))?;
                Ok(chain::ChainRow::new(
                    i64::try_from(r.seq).unwrap_or(i64::MAX),
                    r.prev_hash,
                    r.hash,
                    json,
                ))
            })
            .collect()
    }

    /// The signed checkpoints the journal holds, oldest first (none by default).
    ///
    /// # Errors
    ///
    /// When the journal cannot be read, or a stored checkpoint is not one.
    async fn checkpoints(&self) -> Result<Vec<checkpoint::Checkpoint>, JournalError> {
        Ok(Vec::new())
    }

    /// Stores a signed checkpoint (made by [`checkpoint::make_checkpoint`]), beside the
    /// chain. Never changes a record.
    ///
    /// The default refuses ([`JournalError::Unsupported`]).
    ///
    /// # Errors
    ///
    /// When the journal cannot be written.
    async fn store_checkpoint(
        &self,
        checkpoint: &checkpoint::Checkpoint,
    ) -> Result<(), JournalError> {
        let _ = checkpoint;
        Err(JournalError::Unsupported("checkpoints"))
    }

    /// The anchors of the shards whose oldest records were pruned
    /// ([`Journal::prune_sealed`]), one per such shard (none by default). `verify`,
    /// `verify_signed`, checkpoints and proofs start each such shard from its anchor.
    ///
    /// # Errors
    ///
    /// When the journal cannot be read.
    async fn anchors(&self) -> Result<Vec<retention::Anchor>, JournalError> {
        Ok(Vec::new())
    }

    /// Deletes the records of `anchor.shard` up to `anchor.seq` (those after the shard's
    /// previous anchor) and keeps `anchor` in their place, in one transaction; returns how
    /// many records went. The attempt rows whose every record goes are deleted with them
    /// ([`retention::PrunePlan::attempts`]); signed heads and checkpoints are kept.
    ///
    /// Refused, with nothing deleted, unless a stored checkpoint commits to the anchor and
    /// the records match it ([`retention::plan_prune`]). Export the range first
    /// ([`retention::SealedRange`], `sallyport audit seal`): pruned records are gone.
    ///
    /// The default refuses ([`JournalError::Unsupported`]).
    ///
    /// # Errors
    ///
    /// [`JournalError::PruneRefused`] when the range may not be pruned, or any failure to
    /// read or write.
    async fn prune_sealed(&self, anchor: &retention::Anchor) -> Result<u64, JournalError> {
        let _ = anchor;
        Err(JournalError::Unsupported("pruning sealed records"))
    }

    /// Every audit record that remains (after a prune, those after each anchor), oldest
    /// first.
    ///
    /// # Errors
    ///
    /// When the journal cannot be read.
    async fn records(&self) -> Result<Vec<AuditRecord>, JournalError>;

    /// Attempts left between intent and outcome.
    ///
    /// # Errors
    ///
    /// When the journal cannot be read.
    async fn unresolved(&self) -> Result<Vec<UnresolvedAttempt>, JournalError>;

    /// Appends `event`, which closes `attempt`, only if no record closes the attempt yet: a
    /// compare-and-set, so of two reconcilers settling one attempt exactly one appends.
    /// Returns `Ok(false)` and writes nothing when the attempt is already closed (or has no
    /// attempt row). `event.attempt_id` must be `attempt`.
    ///
    /// The default reads [`Journal::unresolved`] and then [`Journal::append`]s: two steps, so
    /// **not atomic** — two callers may both append. A backend shared by several processes
    /// must override it with one transaction (the SQLite journal does).
    ///
    /// # Errors
    ///
    /// Any failure to read or write; nothing is appended.
    async fn settle_unresolved(
        &self,
        attempt: &AttemptId,
        event: AuditEvent,
    ) -> Result<bool, JournalError> {
        let open = self.unresolved().await?;
        if !open.iter().any(|a| &a.attempt_id == attempt) {
            return Ok(false);
        }
        self.append(event).await?;
        Ok(true)
    }

    /// This journal as an [`ApprovalStore`], when it is one; `None` by default.
    ///
    /// A backend that implements [`ApprovalStore`] overrides it to return `Some(self)`: that
    /// is how [`ExecutorBuilder::journal`](crate::executor::ExecutorBuilder::journal) finds
    /// the approval store of a journal given by value, so `.journal(SqliteJournal::open(p)?)`
    /// is all deferred consent needs. A journal that returns `None` still serves blocking
    /// consent; an executor with deferred consent on it fails to build
    /// ([`BuildError::MissingApprovalStore`](crate::executor::BuildError::MissingApprovalStore)).
    fn approval_store(self: Arc<Self>) -> Option<Arc<dyn ApprovalStore>> {
        None
    }

    /// The store this journal keeps the policy's call counts in, shared by every executor
    /// process on the journal, when it offers one; `None` by default (the executor then
    /// counts in memory, per process). See [`crate::policy::calls`].
    ///
    /// The executor builder takes it with the journal;
    /// [`ExecutorBuilder::local_call_counts`](crate::executor::ExecutorBuilder::local_call_counts)
    /// declines it.
    fn call_store(self: Arc<Self>) -> Option<Arc<dyn crate::policy::calls::CallStore>> {
        None
    }
}

/// The approval store: approvals that outlive the call (see [`crate::approval`]), kept in a
/// [`Journal`] because every step of one is an audit record in the journal's chain.
///
/// Deferred consent ([`ConsentMode::Deferred`](crate::approval::ConsentMode)) needs one; a
/// journal that is not an approval store still serves blocking consent. The executor gets
/// its store when it is built, never finds out at run time that it has none: an executor
/// with deferred consent (for every action or for one) and no store fails
/// [`ExecutorBuilder::build`](crate::executor::ExecutorBuilder::build) with
/// [`BuildError::MissingApprovalStore`](crate::executor::BuildError::MissingApprovalStore).
///
/// # Why a method on [`Journal`] finds it
///
/// The builder takes a journal by value (`.journal(SqliteJournal::open(path)?)`) and keeps
/// it as `Arc<dyn Journal>`; a trait object cannot be asked which other traits its type
/// implements. So [`Journal::approval_store`] (default `None`) is the store's way of making
/// itself known: a backend implementing this trait overrides it to return `Some(self)`, and
/// `.journal(j)` and `.journal_arc(j)` pick the store up with no change for their callers.
/// [`ExecutorBuilder::journal_with_approvals`](crate::executor::ExecutorBuilder::journal_with_approvals)
/// takes an `impl ApprovalStore` directly, for a backend that does not override it.
///
/// # What a backend must guarantee
///
/// Everything [`Journal`] asks for, and:
///
/// * **Compare-and-set transitions.** Every change below checks the approval's state (and
///   for [`ApprovalStore::begin_approved`] and [`ApprovalStore::settle_approval`], its claim:
///   owner and epoch) and changes it in one step that holds across threads and processes
///   sharing the store: of two racing deciders, claimers or settlers exactly one changes the
///   approval; the others get [`Transition::Unchanged`] (or [`JournalError::Fenced`]) and
///   write nothing.
/// * **Audited with the change.** A change that takes an audit event appends it to the one
///   chain in the same transaction as the change: after an error neither is stored. The
///   records follow the chain rules of [`Journal`] (next sequence number, link to the record
///   before, JSON byte for byte as hashed).
/// * **Intents with their approval.** [`ApprovalStore::begin_approved`] writes the intent
///   (durably when it says so) in the same transaction that moves the approval to
///   `executing`; [`ApprovalStore::settle_approval`]'s event closes that attempt like
///   [`Journal::append`] does.
/// * **Stored as given.** An approval read back equals the one parked, with the fields the
///   transitions set (decision, claim, execution, result); the arguments stored are the
///   scrubbed ones the executor hands over.
/// * **A call's last record is handed over on the first poll.**
///   [`ApprovalStore::park_approval`] and [`ApprovalStore::settle_approval`] write a call's
///   last record, like [`Journal::append`]: once their future has been polled the write
///   must be carried out even if the future is then dropped.
///
/// * **Remembered approvals, if kept.** [`ApprovalStore::store_remembered`],
///   [`ApprovalStore::remembered_approvals`] and [`ApprovalStore::revoke_remembered`] keep an
///   approver's standing approvals as given; a revocation is a compare-and-set across
///   processes ([`RememberedApproval::revoke`] applied to the stored row). Their defaults
///   keep none, and then every call is asked as before. They are audited by the caller
///   ([`crate::approval::remember_under`], [`crate::approval::revoke_remembered`]), not in
///   the store's transaction: the order of the two writes keeps a crash on the safe side.
///
/// The conformance suite in `sallyport-testkit` (feature `conformance`) checks these
/// properties, and the [`Journal`] ones, against a backend; [`MemoryJournal`] is the
/// smallest implementation that passes it.
#[async_trait]
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a sallyport approval store",
    note = "deferred consent needs a journal that stores approvals: `SqliteJournal`, `PostgresJournal` or `MemoryJournal`, or implement `sallyport_core::journal::ApprovalStore`"
)]
pub trait ApprovalStore: Journal {
    /// Stores a new approval (state `awaiting`) and appends `event`, the parked call's record.
    ///
    /// # Errors
    ///
    /// Any failure to write; the executor then refuses the call (`journal_unavailable`).
    async fn park_approval(
        &self,
        approval: &Approval,
        event: AuditEvent,
    ) -> Result<AuditRecord, JournalError>;

    /// The approval with this id, if any.
    ///
    /// # Errors
    ///
    /// When the store cannot be read.
    async fn approval(&self, id: &ApprovalId) -> Result<Option<Approval>, JournalError>;

    /// The approvals `filter` selects, newest first.
    ///
    /// # Errors
    ///
    /// When the store cannot be read.
    async fn approvals(&self, filter: &ApprovalFilter) -> Result<Vec<Approval>, JournalError>;

    /// Records `decision` if the approval is `awaiting` and `decision.at_ms` is before its
    /// expiry: state `approved` or `denied`, and `event` appended. Otherwise
    /// [`Transition::Unchanged`] and nothing is written.
    ///
    /// # Errors
    ///
    /// Any failure to read or write.
    async fn decide_approval(
        &self,
        id: &ApprovalId,
        decision: &ApprovalDecision,
        event: AuditEvent,
    ) -> Result<Transition, JournalError>;

    /// Marks the approval `expired` if it is `awaiting` and `now_ms` is at or past its
    /// expiry, appending `event`. Otherwise [`Transition::Unchanged`].
    ///
    /// # Errors
    ///
    /// Any failure to read or write.
    async fn expire_approval(
        &self,
        id: &ApprovalId,
        now_ms: u64,
        event: AuditEvent,
    ) -> Result<Transition, JournalError>;

    /// Claims an `approved` approval for `owner` until `now_ms + lease_ms`, if no claim is
    /// held or the held one's lease ended: the claim's epoch is the previous one plus one.
    /// Otherwise [`Transition::Unchanged`]. Not audited (the execution's record is).
    ///
    /// # Errors
    ///
    /// Any failure to read or write.
    async fn claim_approval(
        &self,
        id: &ApprovalId,
        owner: &str,
        now_ms: u64,
        lease_ms: u64,
    ) -> Result<Transition, JournalError>;

    /// Writes `intent` (durably when it says so) and moves the approval to `executing` with
    /// `intent.attempt_id` as its execution, in one transaction — only while the approval is
    /// `approved` and `claim` (owner and epoch) is the one it holds.
    ///
    /// # Errors
    ///
    /// [`JournalError::Fenced`] when the claim is not the current one (nothing written), or
    /// any failure to write: the executor then sends nothing.
    async fn begin_approved(
        &self,
        id: &ApprovalId,
        claim: &Claim,
        intent: &Intent,
    ) -> Result<(), JournalError>;

    /// Moves the approval to `finished` holding `result`, and appends `event` (the
    /// execution's record, which closes its attempt if an intent was written), in one
    /// transaction — only while the approval is `approved` or `executing` under `claim`.
    ///
    /// # Errors
    ///
    /// [`JournalError::Fenced`] when the claim is not the current one (nothing written), or
    /// any failure to write.
    async fn settle_approval(
        &self,
        id: &ApprovalId,
        claim: &Claim,
        result: &crate::outcome::ActionResult,
        event: AuditEvent,
    ) -> Result<AuditRecord, JournalError>;

    /// A watch that wakes when an approval may have been decided, for a worker carrying
    /// out approved calls ([`Executor::run_approval_worker`](crate::Executor::run_approval_worker)):
    /// it waits on the watch between two listings of the approved calls instead of
    /// sleeping. The default never wakes ([`DecisionWatch::sleeping`]): the worker then
    /// lists every interval, as it polls.
    ///
    /// A backend that overrides it must wake the watch, at least once, for every decision
    /// stored after the watch was made (by any process on the store), and only once the
    /// decision can be read; and when it may have missed one (a lost connection), once it
    /// can tell again, so that the worker lists everything. It may wake more often than
    /// that: a wake-up costs a listing. The caller makes the watch before its first
    /// listing, so that nothing decided between the two is missed.
    ///
    /// How the backends here do it: `PostgresJournal` notifies on channel
    /// `sallyport_approvals` in each decision's transaction and listens on a connection of
    /// its own; `SqliteJournal` polls `PRAGMA data_version` every few milliseconds on a
    /// connection of its own; [`MemoryJournal`] notifies in process.
    fn watch_decisions(&self) -> DecisionWatch {
        DecisionWatch::sleeping()
    }

    /// Stores a new remembered approval ([`crate::approval::remember_under`] makes it and audits
    /// it). Not audited here: the caller appends the record `remembered` *before* storing,
    /// so a crash between the two leaves a record of a remembered approval that never
    /// covers anything, never one that covers calls unrecorded.
    ///
    /// The default refuses ([`JournalError::Unsupported`]): a backend that does not keep
    /// remembered approvals has none, and every call is asked as before.
    ///
    /// # Errors
    ///
    /// [`JournalError::DuplicateKey`] when its id is already stored, or any failure to write.
    async fn store_remembered(&self, remembered: &RememberedApproval) -> Result<(), JournalError> {
        let _ = remembered;
        Err(JournalError::Unsupported("remembered approvals"))
    }

    /// The remembered approvals of `action` (of every action when `None`), revoked and
    /// expired ones included, newest first. The executor reads them at stage 8 before it
    /// asks anyone; a failure there means asking, never sending unasked.
    ///
    /// The default has none.
    ///
    /// # Errors
    ///
    /// When the store cannot be read.
    async fn remembered_approvals(
        &self,
        action: Option<&str>,
    ) -> Result<Vec<RememberedApproval>, JournalError> {
        let _ = action;
        Ok(Vec::new())
    }

    /// Revokes the remembered approval `id` as [`RememberedApproval::revoke`] allows (a
    /// compare-and-set: of two racing revocations one is applied, the other finds it
    /// revoked). Not audited here: the caller appends the record `revoked` once it applied,
    /// so a crash between the two leaves a revoked approval, never a live one recorded as
    /// revoked.
    ///
    /// The default refuses ([`JournalError::Unsupported`]).
    ///
    /// # Errors
    ///
    /// Any failure to read or write.
    async fn revoke_remembered(
        &self,
        id: &RememberedId,
        revocation: &Revocation,
    ) -> Result<Revoked, JournalError> {
        let _ = (id, revocation);
        Err(JournalError::Unsupported("remembered approvals"))
    }
}

/// Writes records as JSON lines (one [`AuditRecord`] per line) for SIEM pipelines.
///
/// # Errors
///
/// When the journal cannot be read or `out` cannot be written.
pub async fn export_json_lines(
    journal: &dyn Journal,
    out: &mut dyn std::io::Write,
) -> Result<u64, ExportError> {
    let records = journal.records().await?;
    for record in &records {
        serde_json::to_writer(&mut *out, record).map_err(|e| ExportError::Io(e.into()))?;
        out.write_all(b"\n").map_err(ExportError::Io)?;
    }
    Ok(records.len() as u64)
}

/// An export failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    /// Reading the journal failed.
    #[error("cannot read the journal")]
    Journal(#[from] JournalError),
    /// Writing the output failed.
    #[error("cannot write the export")]
    Io(#[source] std::io::Error),
}
