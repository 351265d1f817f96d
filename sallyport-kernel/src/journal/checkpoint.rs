//! Signed checkpoints and inclusion proofs for one record, in the manner of Certificate
//! Transparency (RFC 9162) and Sigstore's Rekor.
//!
//! A [`Checkpoint`] commits to the head of every shard of the journal: within a shard, a
//! Merkle tree over its records ([`merkle`], RFC 6962 shape; a record's leaf data is its
//! chain hash, 32 bytes, which already covers its sequence number, the previous hash and the
//! event JSON as stored), and over the shards, a Merkle tree of their [`ShardHead`]s. The
//! root of that second tree is signed with the journal's Ed25519 key
//! ([`HeadSigningKey`]), under a domain tag of its own (`sallyport signed checkpoint v1`),
//! so a checkpoint signature is never a head signature or the reverse. A journal without
//! shards has one chain, the shard [`DEFAULT_SHARD`]; a journal whose writers append to
//! several shards (`PostgresJournalBuilder::audit_shard`) lists each, and a proof names its
//! shard. Checkpoints are made on demand ([`make_checkpoint`], `sallyport audit
//! checkpoint`) or periodically ([`PeriodicCheckpoints`], `audit checkpoint --every`).
//!
//! An [`InclusionProof`] carries one record as stored (without its chain hash: the verifier
//! recomputes it from the previous hash, the sequence number and the event), its Merkle
//! path, and the signed checkpoint. [`InclusionProof::verify`] checks it with the public
//! key alone, without the rest of the log: the record's recomputed hash, leaf-hashed at its
//! position, leads along the path to the shard's root, the shard heads hash to the
//! checkpoint's root, and the key signed that root. An edited, reordered or deleted record gives another root, and so a
//! proof that fails.
//!
//! Formats are JSON, versioned by their `format` field ([`CHECKPOINT_FORMAT`],
//! [`PROOF_FORMAT`]); hashes are lowercase hex, signatures base64, except a proof's Merkle
//! path, which is one unpadded base64url string (RFC 4648 §5, no `=`) of its 32-byte hashes
//! concatenated in order ([`encode_path`], [`decode_path`]): 20 steps, for a tree of a
//! million records, take 854 characters instead of 20 quoted hex strings' 1,340.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use super::chain::{ChainCheck, ChainRow, chain_hash};
use super::merkle::{self, Hash};
use super::retention::Anchor;
use super::signing::{HeadSigningKey, HeadVerifyingKey};
use super::{AuditEvent, BreakKind, ChainBreak, Journal, JournalError, ReceiptId};

/// The `format` of a checkpoint.
pub const CHECKPOINT_FORMAT: &str = "sallyport-checkpoint-v1";
/// The `format` of an inclusion proof.
pub const PROOF_FORMAT: &str = "sallyport-inclusion-proof-v1";
/// The name of the one shard a journal has today: its single chain.
pub const DEFAULT_SHARD: &str = "default";
/// Domain separation of the checkpoint signature (the head signature has its own tag).
const SIGNATURE_TAG: &str = "sallyport signed checkpoint v1";
/// Domain separation of a shard head's leaf in the checkpoint's tree.
const SHARD_LEAF_TAG: &str = "sallyport shard head v1";

/// One shard's head as a checkpoint commits to it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ShardHead {
    /// The shard's name ([`DEFAULT_SHARD`] for the one chain of today's journals).
    pub shard: String,
    /// How many records of the shard the checkpoint covers (records 1 to `size`).
    pub size: u64,
    /// The Merkle root (hex) over those records' chain hashes.
    pub root: String,
    /// The chain hash of record `size` (64 zeros when `size` is 0): the chain head.
    pub head: String,
}

impl ShardHead {
    /// The head of the shard named `shard` over `chain` (the stored hash of each record, in
    /// order). `None` when a hash is not 64 hex digits (the chain was damaged).
    pub fn over(shard: impl Into<String>, chain: &[String]) -> Option<Self> {
        Self::over_from(shard, None, chain)
    }

    /// [`ShardHead::over`] for a shard whose records up to `anchor` were pruned: `chain`
    /// holds the stored hashes of the records after it, and the root carries on from the
    /// anchor's frontier. `None` also when the anchor's frontier is unreadable.
    pub fn over_from(
        shard: impl Into<String>,
        anchor: Option<&Anchor>,
        chain: &[String],
    ) -> Option<Self> {
        let shard = shard.into();
        let mut acc = match anchor {
            Some(a) => a.accumulator()?,
            None => merkle::Accumulator::new(),
        };
        for hash in chain {
            acc.push(record_leaf(hash)?);
        }
        let start = anchor.map_or_else(|| super::chain::shard_genesis(&shard), |a| a.hash.clone());
        Some(Self {
            size: acc.count(),
            root: hex::encode(acc.root()),
            head: chain.last().cloned().unwrap_or(start),
            shard,
        })
    }

    /// This head's leaf in the checkpoint's tree of shards.
    fn leaf(&self) -> Hash {
        merkle::leaf_hash(
            format!(
                "{SHARD_LEAF_TAG}\n{}\n{}\n{}\n{}",
                self.shard, self.size, self.root, self.head
            )
            .as_bytes(),
        )
    }
}

/// The Merkle leaf of a record: its chain hash (hex) decoded to 32 bytes, leaf-hashed.
/// `None` when the hash is not 64 hex digits.
pub fn record_leaf(chain_hash: &str) -> Option<Hash> {
    let mut bytes = [0_u8; 32];
    hex::decode_to_slice(chain_hash, &mut bytes).ok()?;
    Some(merkle::leaf_hash(&bytes))
}

/// A proof's Merkle path as it is written: the 32-byte hashes concatenated in order, as one
/// unpadded base64url string (RFC 4648 §5, alphabet `A-Z a-z 0-9 - _`, no `=`). The empty
/// path (a tree of one record) is the empty string.
pub fn encode_path(path: &[Hash]) -> String {
    URL_SAFE_NO_PAD.encode(path.concat())
}

/// Reads a path written by [`encode_path`].
///
/// # Errors
///
/// [`ProofError::PathEncoding`] when the text is not unpadded base64url (a character
/// outside the alphabet, padding, a length no byte string has, or stray trailing bits), or
/// when it decodes to a length that is not a whole number of 32-byte hashes.
pub fn decode_path(text: &str) -> Result<Vec<Hash>, ProofError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(text)
        .map_err(|e| ProofError::PathEncoding {
            detail: format!("not unpadded base64url: {e}"),
        })?;
    if bytes.len() % 32 != 0 {
        return Err(ProofError::PathEncoding {
            detail: format!(
                "{} bytes, not a whole number of 32-byte hashes",
                bytes.len()
            ),
        });
    }
    Ok(bytes
        .chunks_exact(32)
        .map(|c| {
            let mut h = [0_u8; 32];
            h.copy_from_slice(c);
            h
        })
        .collect())
}

/// A signed commitment to every shard's head at one moment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Checkpoint {
    /// [`CHECKPOINT_FORMAT`].
    pub format: String,
    /// Every shard's head, in shard order.
    pub shards: Vec<ShardHead>,
    /// The Merkle root (hex) over the shard heads.
    pub root: String,
    /// When it was signed (RFC 3339); covered by the signature.
    pub signed_at: String,
    /// The key id ([`HeadVerifyingKey::key_id`]) of the key that signed.
    pub key_id: String,
    /// The Ed25519 signature (base64) over the domain tag, the number of shards, the root
    /// and `signed_at`.
    pub signature: String,
}

impl Checkpoint {
    /// Signs a checkpoint over `shards` with `key`.
    pub fn sign(
        key: &HeadSigningKey,
        shards: Vec<ShardHead>,
        signed_at: impl Into<String>,
    ) -> Self {
        let root = hex::encode(shards_root(&shards));
        let signed_at = signed_at.into();
        let signature = key.sign_message(&message(shards.len(), &root, &signed_at));
        Self {
            format: CHECKPOINT_FORMAT.to_owned(),
            shards,
            root,
            signed_at,
            key_id: key.verifying_key().key_id(),
            signature,
        }
    }

    /// The head of the shard named `shard`.
    pub fn shard(&self, shard: &str) -> Option<&ShardHead> {
        self.shards.iter().find(|s| s.shard == shard)
    }

    /// Checks the checkpoint alone: its format, that its shard heads hash to its root, and
    /// that `key` signed that root.
    ///
    /// # Errors
    ///
    /// [`ProofError::Format`], [`ProofError::ShardHeads`], [`ProofError::OtherKey`] or
    /// [`ProofError::BadSignature`].
    pub fn check(&self, key: &HeadVerifyingKey) -> Result<(), ProofError> {
        if self.format != CHECKPOINT_FORMAT {
            return Err(ProofError::Format {
                what: "checkpoint",
                found: self.format.clone(),
                expected: CHECKPOINT_FORMAT,
            });
        }
        if hex::encode(shards_root(&self.shards)) != self.root {
            return Err(ProofError::ShardHeads);
        }
        if self.key_id != key.key_id() {
            return Err(ProofError::OtherKey {
                found: self.key_id.clone(),
                expected: key.key_id(),
            });
        }
        if !key.verifies_message(
            &message(self.shards.len(), &self.root, &self.signed_at),
            &self.signature,
        ) {
            return Err(ProofError::BadSignature);
        }
        Ok(())
    }
}

/// The root of the tree over the shard heads.
fn shards_root(shards: &[ShardHead]) -> Hash {
    let leaves: Vec<Hash> = shards.iter().map(ShardHead::leaf).collect();
    merkle::root(&leaves)
}

/// The bytes a checkpoint signature covers.
fn message(shards: usize, root: &str, signed_at: &str) -> Vec<u8> {
    format!("{SIGNATURE_TAG}\n{shards}\n{root}\n{signed_at}").into_bytes()
}

/// One record exactly as stored, in a proof. Its chain hash (the Merkle leaf's data) is not
/// carried: [`InclusionProof::verify`] recomputes it from these three fields, so a proof
/// has no stored hash to trust.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ProvenRecord {
    /// Its sequence number in its shard (from 1).
    pub seq: u64,
    /// The hash of the record before it (hex, as stored).
    pub prev_hash: String,
    /// The event JSON byte for byte as stored and hashed.
    pub event: String,
}

impl ProvenRecord {
    /// Its chain hash (hex), recomputed from the previous hash, the sequence number and the
    /// event.
    pub fn hash(&self) -> String {
        chain_hash(&self.prev_hash, self.seq, &self.event)
    }
}

/// An inclusion proof for one record: the record, its Merkle path and the signed
/// checkpoint whose tree holds it. Checked with the public key alone
/// ([`InclusionProof::verify`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct InclusionProof {
    /// [`PROOF_FORMAT`].
    pub format: String,
    /// The receipt id of the record (also inside its event; checked to agree).
    pub receipt_id: ReceiptId,
    /// The shard the record is in.
    pub shard: String,
    /// The record.
    pub record: ProvenRecord,
    /// The leaf's index in the shard's tree (`seq - 1`).
    pub leaf_index: u64,
    /// The shard's tree size (the checkpoint's size for the shard).
    pub tree_size: u64,
    /// The audit path, from the leaf's sibling up to the root's child, as [`encode_path`]
    /// writes it (one unpadded base64url string of the 32-byte hashes concatenated).
    pub path: String,
    /// The signed checkpoint.
    pub checkpoint: Checkpoint,
}

/// What a verified proof shows.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Proven {
    /// The record's receipt id.
    pub receipt_id: ReceiptId,
    /// Its shard and position.
    pub shard: String,
    /// Its sequence number.
    pub seq: u64,
    /// How many records of the shard the checkpoint covers.
    pub tree_size: u64,
    /// When the checkpoint was signed.
    pub signed_at: String,
    /// The key that signed it.
    pub key_id: String,
}

impl InclusionProof {
    /// The proof that the record at `seq` (from 1) of the shard named `shard` is in
    /// `checkpoint`'s tree; `rows` are the journal's stored rows (every row of the shard, in
    /// order; rows of other shards are passed over) is in `checkpoint`'s tree. The rows are checked against the
    /// checkpoint first: a journal rewritten since the checkpoint gives no proof.
    ///
    /// # Errors
    ///
    /// See [`ProveError`].
    pub fn build(
        rows: &[ChainRow],
        shard: &str,
        checkpoint: &Checkpoint,
        seq: u64,
    ) -> Result<Self, ProveError> {
        Self::build_from(None, rows, shard, checkpoint, seq)
    }

    /// [`InclusionProof::build`] in a journal whose records of the shard up to `anchor`
    /// were pruned ([`super::retention`]): `rows` hold the records after it, and the
    /// pruned part of the tree is taken from the anchor's frontier, so a record after the
    /// anchor proves against any checkpoint that covers it, older or newer than the prune.
    /// A pruned record gives [`ProveError::Pruned`] (its proof is its sealed export).
    ///
    /// # Errors
    ///
    /// See [`ProveError`].
    pub fn build_from(
        anchor: Option<&Anchor>,
        rows: &[ChainRow],
        shard: &str,
        checkpoint: &Checkpoint,
        seq: u64,
    ) -> Result<Self, ProveError> {
        let head = checkpoint
            .shard(shard)
            .ok_or_else(|| ProveError::NoShard(shard.to_owned()))?;
        let rows: Vec<&ChainRow> = rows.iter().filter(|r| r.shard == shard).collect();
        if seq == 0 || seq > head.size {
            return Err(ProveError::NotCovered {
                seq,
                size: head.size,
            });
        }
        let base_acc = match anchor.filter(|a| a.shard == shard) {
            Some(a) => a.accumulator().ok_or_else(|| ProveError::Rewritten {
                detail: format!("the anchor of shard `{shard}` has an unreadable frontier"),
            })?,
            None => merkle::Accumulator::new(),
        };
        let base = base_acc.count();
        if seq <= base {
            return Err(ProveError::Pruned { seq, upto: base });
        }
        if head.size < base {
            return Err(ProveError::Rewritten {
                detail: format!(
                    "the checkpoint covers {} records, fewer than the {base} pruned; prove against a checkpoint made since",
                    head.size
                ),
            });
        }
        let size = usize::try_from(head.size - base).unwrap_or(usize::MAX);
        if rows.len() < size {
            return Err(ProveError::Rewritten {
                detail: format!(
                    "the checkpoint covers {} records but the journal holds {}: truncated",
                    head.size,
                    base + rows.len() as u64
                ),
            });
        }
        let mut leaves = Vec::with_capacity(size);
        for (i, row) in rows[..size].iter().enumerate() {
            leaves.push(record_leaf(&row.hash).ok_or_else(|| ProveError::Rewritten {
                detail: format!("record {} has no readable hash", base + i as u64 + 1),
            })?);
        }
        let tree = merkle::PrunedTree::new(&base_acc, &leaves);
        if tree.root().map(hex::encode).as_deref() != Some(head.root.as_str()) {
            return Err(ProveError::Rewritten {
                detail: format!(
                    "records 1 to {} no longer hash to the checkpoint's root: records were edited, reordered or deleted since it was signed",
                    head.size
                ),
            });
        }
        let index = usize::try_from(seq - base - 1).unwrap_or(usize::MAX);
        let row = &rows[index];
        let receipt_id = serde_json::from_str::<AuditEvent>(&row.event_json)
            .map_err(|_| ProveError::Rewritten {
                detail: format!("record {seq} is not a readable audit event"),
            })?
            .receipt_id;
        let path = encode_path(&tree.path(seq - 1).unwrap_or_default());
        Ok(Self {
            format: PROOF_FORMAT.to_owned(),
            receipt_id,
            shard: shard.to_owned(),
            record: ProvenRecord {
                seq,
                prev_hash: row.prev_hash.clone(),
                event: row.event_json.clone(),
            },
            leaf_index: seq - 1,
            tree_size: head.size,
            path,
            checkpoint: checkpoint.clone(),
        })
    }

    /// The proof as `sallyport audit prove` writes it: one line of compact JSON and a
    /// newline.
    pub fn to_written(&self) -> String {
        let mut text = serde_json::to_string(self).unwrap_or_default();
        text.push('\n');
        text
    }

    /// Checks the proof with the public key alone.
    ///
    /// # Errors
    ///
    /// The first thing found wrong ([`ProofError`]).
    pub fn verify(&self, key: &HeadVerifyingKey) -> Result<Proven, ProofError> {
        if self.format != PROOF_FORMAT {
            return Err(ProofError::Format {
                what: "inclusion proof",
                found: self.format.clone(),
                expected: PROOF_FORMAT,
            });
        }
        let r = &self.record;
        let event: AuditEvent =
            serde_json::from_str(&r.event).map_err(|_| ProofError::NotAnEvent)?;
        if event.receipt_id != self.receipt_id {
            return Err(ProofError::OtherReceipt {
                named: self.receipt_id.to_string(),
                found: event.receipt_id.to_string(),
            });
        }
        if r.seq == 0 || self.leaf_index != r.seq - 1 {
            return Err(ProofError::Position {
                seq: r.seq,
                leaf_index: self.leaf_index,
            });
        }
        let head = self
            .checkpoint
            .shard(&self.shard)
            .ok_or_else(|| ProofError::NoShard(self.shard.clone()))?;
        if self.tree_size != head.size {
            return Err(ProofError::TreeSize {
                proof: self.tree_size,
                checkpoint: head.size,
            });
        }
        let path = decode_path(&self.path)?;
        // Never a stored hash: the record's own, recomputed, is the leaf proven.
        let hash = r.hash();
        let leaf = record_leaf(&hash).ok_or(ProofError::Path)?;
        match merkle::root_from_path(self.leaf_index, self.tree_size, &leaf, &path) {
            Some(root) if hex::encode(root) == head.root => {}
            _ => return Err(ProofError::Path),
        }
        if r.seq == head.size && hash != head.head {
            return Err(ProofError::Path);
        }
        self.checkpoint.check(key)?;
        Ok(Proven {
            receipt_id: self.receipt_id.clone(),
            shard: self.shard.clone(),
            seq: r.seq,
            tree_size: self.tree_size,
            signed_at: self.checkpoint.signed_at.clone(),
            key_id: self.checkpoint.key_id.clone(),
        })
    }
}

/// Why a proof could not be made from a journal.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProveError {
    /// The checkpoint has no head for the shard.
    #[error("the checkpoint has no shard `{0}`")]
    NoShard(String),
    /// The record comes after the checkpoint (or there is no such position).
    #[error(
        "record {seq} is not covered by the checkpoint (it covers records 1 to {size}); make a newer checkpoint with `sallyport audit checkpoint`"
    )]
    NotCovered {
        /// The record's position.
        seq: u64,
        /// The checkpoint's size for the shard.
        size: u64,
    },
    /// The journal no longer matches the checkpoint.
    #[error("the journal does not match its checkpoint: {detail}")]
    Rewritten {
        /// What does not match.
        detail: String,
    },
    /// The record was sealed and pruned from the journal: its sealed export
    /// (`sallyport audit check-export`) is what proves it now.
    #[error(
        "record {seq} was sealed and pruned (records 1 to {upto} are gone from the journal); check it in its sealed export"
    )]
    Pruned {
        /// The record's position.
        seq: u64,
        /// The last position pruned.
        upto: u64,
    },
}

/// Why a proof (or a checkpoint) does not verify.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProofError {
    /// Not a format this version reads.
    #[error("not a {what} this sallyport reads: format `{found}`, expected `{expected}`")]
    Format {
        /// What was read.
        what: &'static str,
        /// The format it names.
        found: String,
        /// The format expected.
        expected: &'static str,
    },
    /// The record's event is not an audit event.
    #[error("the record is not a readable audit event")]
    NotAnEvent,
    /// The proof names another receipt than its record holds.
    #[error("the proof names receipt {named} but its record is receipt {found}")]
    OtherReceipt {
        /// The receipt the proof names.
        named: String,
        /// The receipt in the record.
        found: String,
    },
    /// The leaf's index is not the record's position.
    #[error("the record is record {seq} but the proof places it at leaf {leaf_index}")]
    Position {
        /// The record's sequence number.
        seq: u64,
        /// The leaf index the proof gives.
        leaf_index: u64,
    },
    /// The checkpoint has no head for the proof's shard.
    #[error("the checkpoint has no shard `{0}`")]
    NoShard(String),
    /// The proof's tree size is not the checkpoint's.
    #[error("the proof is for a tree of {proof} records but the checkpoint signed {checkpoint}")]
    TreeSize {
        /// The size the proof gives.
        proof: u64,
        /// The size the checkpoint signed.
        checkpoint: u64,
    },
    /// The record's recomputed hash does not lead along the path to the checkpoint's root.
    #[error(
        "the Merkle path does not lead from the record to the checkpoint's root: the record, its position or the path was changed"
    )]
    Path,
    /// The path is not written as [`encode_path`] writes it.
    #[error("the proof's path is not unpadded base64url of concatenated 32-byte hashes: {detail}")]
    PathEncoding {
        /// What is wrong with it (bad characters, padding or length).
        detail: String,
    },
    /// The checkpoint's shard heads do not hash to its root.
    #[error("the checkpoint's shard heads do not hash to its signed root")]
    ShardHeads,
    /// The checkpoint was signed by another key.
    #[error("the checkpoint was signed by key {found}, not by key {expected}")]
    OtherKey {
        /// The key id the checkpoint names.
        found: String,
        /// The key id of the public key given.
        expected: String,
    },
    /// The signature does not verify.
    #[error("the checkpoint's signature does not verify: forged or altered")]
    BadSignature,
}

/// Checks the journal's chain, signs a checkpoint over it with `key` and stores it in the
/// journal ([`Journal::store_checkpoint`]). Records appended meanwhile are left for the next
/// checkpoint. Run it on demand (`sallyport audit checkpoint`) or on a schedule.
///
/// # Errors
///
/// [`CheckpointError::Broken`] when the chain is broken (nothing is signed), otherwise when
/// the journal cannot be read or written.
pub async fn make_checkpoint(
    journal: &dyn Journal,
    key: &HeadSigningKey,
) -> Result<Checkpoint, CheckpointError> {
    let check = checked_chain(journal).await?;
    sign_and_store(journal, &check, key).await
}

/// The journal's chain, read once and checked from its anchors: the check a checkpoint
/// signs, or the break that stops it.
async fn checked_chain(journal: &dyn Journal) -> Result<ChainCheck, CheckpointError> {
    let anchors = journal.anchors().await?;
    let check = ChainCheck::with_anchors(anchors, journal.chain_rows().await?);
    match check.report().first_break.clone() {
        Some(brk) => Err(CheckpointError::Broken(brk)),
        None => Ok(check),
    }
}

/// Signs the heads of the intact `check` and stores the checkpoint.
async fn sign_and_store(
    journal: &dyn Journal,
    check: &ChainCheck,
    key: &HeadSigningKey,
) -> Result<Checkpoint, CheckpointError> {
    let heads = check.shard_heads().ok_or_else(|| {
        CheckpointError::Broken(ChainBreak {
            seq: 0,
            kind: BreakKind::Malformed,
            detail: "a record's hash or an anchor's frontier is not hex of 32 bytes".to_owned(),
            attempt: None,
            shard: None,
        })
    })?;
    let checkpoint = Checkpoint::sign(key, heads, super::now());
    journal.store_checkpoint(&checkpoint).await?;
    Ok(checkpoint)
}

/// [`make_checkpoint`], unless the newest checkpoint `key` signed already covers every
/// shard as it is now (nothing was appended since): `Ok(None)` then, and nothing is stored.
/// The chain is read and checked once either way.
///
/// # Errors
///
/// As [`make_checkpoint`].
pub async fn checkpoint_if_grown(
    journal: &dyn Journal,
    key: &HeadSigningKey,
) -> Result<Option<Checkpoint>, CheckpointError> {
    let check = checked_chain(journal).await?;
    let key_id = key.verifying_key().key_id();
    // By position, so a shard whose oldest records were pruned counts them too.
    let sizes: Vec<(&str, u64)> = check.shard_sizes().collect();
    let checkpoints = journal.checkpoints().await?;
    let newest = checkpoints.iter().rev().find(|c| c.key_id == key_id);
    let covered = newest.is_some_and(|c| {
        sizes
            .iter()
            .all(|(shard, size)| c.shard(shard).map_or(*size == 0, |h| h.size == *size))
    });
    if covered {
        return Ok(None);
    }
    sign_and_store(journal, &check, key).await.map(Some)
}

/// Signs a checkpoint every `period` while the journal grows, until dropped (or
/// [`stop`](Self::stop)ped): the periodic half of issue 39's checkpoints, beside
/// [`make_checkpoint`] on demand. A period in which nothing was appended signs nothing
/// ([`checkpoint_if_grown`]). A chain found broken is logged (`tracing` error, with the
/// break) and not signed; the next period tries again, so a repaired or restored journal is
/// checkpointed again without a restart.
///
/// ```
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use sallyport_core::journal::checkpoint::PeriodicCheckpoints;
/// use sallyport_core::journal::{HeadSigningKey, Journal, MemoryJournal};
///
/// let journal: Arc<dyn Journal> = Arc::new(MemoryJournal::new());
/// let key = HeadSigningKey::generate()?;
/// let checkpoints = PeriodicCheckpoints::start(journal, key, Duration::from_secs(300));
/// // … the executor runs; every five minutes a checkpoint covers what it wrote …
/// checkpoints.stop();
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct PeriodicCheckpoints {
    task: tokio::task::JoinHandle<()>,
}

impl PeriodicCheckpoints {
    /// Starts signing on the current Tokio runtime; the first checkpoint is made at once
    /// (when the journal holds records no checkpoint by `key` covers), then every `period`
    /// (at least one second).
    pub fn start(journal: Arc<dyn Journal>, key: HeadSigningKey, period: Duration) -> Self {
        let period = period.max(Duration::from_secs(1));
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(period);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                match checkpoint_if_grown(journal.as_ref(), &key).await {
                    Ok(Some(cp)) => tracing::info!(
                        signed_at = %cp.signed_at,
                        records = cp.shards.iter().map(|h| h.size).sum::<u64>(),
                        shards = cp.shards.len(),
                        "audit checkpoint signed"
                    ),
                    Ok(None) => {}
                    Err(e) => tracing::error!(error = %e, "no audit checkpoint was signed"),
                }
            }
        });
        Self { task }
    }

    /// Stops signing (a checkpoint being stored when this is called may still land).
    pub fn stop(self) {
        self.task.abort();
    }
}

impl Drop for PeriodicCheckpoints {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Why no checkpoint was made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// The chain is broken: a checkpoint would sign the damage.
    #[error("the audit chain is broken at record {} ({}): {}; no checkpoint was signed", .0.seq, .0.kind.as_str(), .0.detail)]
    Broken(ChainBreak),
    /// The journal could not be read or written.
    #[error(transparent)]
    Journal(#[from] JournalError),
}

/// What [`check_checkpoints`] found.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct CheckpointCoverage {
    /// The largest size of the default shard a valid checkpoint by the key covers.
    pub last_signed: Option<u64>,
    /// The first problem: a checkpoint by the key whose signature or root does not verify
    /// ([`BreakKind::BadSignature`]), that no longer matches the chain
    /// ([`BreakKind::HeadMismatch`]), or that is longer than the chain
    /// ([`BreakKind::Deleted`]).
    pub problem: Option<ChainBreak>,
    /// How many checkpoints were checked (signed by the key).
    pub checked: usize,
}

/// Checks every checkpoint signed by `key` against the default shard's `chain` (the stored
/// hash of each record, in order). Checkpoints by other keys are skipped. One pass over the
/// chain, however many checkpoints.
pub fn check_checkpoints(
    chain: &[String],
    checkpoints: &[Checkpoint],
    key: &HeadVerifyingKey,
) -> CheckpointCoverage {
    check_checkpoints_in(DEFAULT_SHARD, chain, checkpoints, key)
}

/// [`check_checkpoints`] for the shard named `shard`, whose stored hashes are `chain`. A
/// checkpoint with no head for a shard other than the default was made before the shard
/// had records: it covers none of them, and is no problem.
pub fn check_checkpoints_in(
    shard: &str,
    chain: &[String],
    checkpoints: &[Checkpoint],
    key: &HeadVerifyingKey,
) -> CheckpointCoverage {
    check_checkpoints_anchored(shard, None, chain, checkpoints, key)
}

/// [`check_checkpoints_in`] for a shard whose records up to `anchor` were pruned: `chain`
/// holds the stored hashes of the records after it. Every checkpoint's signature is
/// checked; one of the anchor's size must match the anchor exactly (its head, and its root
/// recomputed from the anchor's frontier), and the anchor is accepted only when one by the
/// key does: otherwise the first problem is a [`BreakKind::HeadMismatch`] at the anchor. A
/// longer one is compared with the records after the anchor, its root carried on from the
/// frontier. A shorter one covers only pruned records: it is not compared with anything
/// here (its records are in the sealed export, which `SealedRange::verify` checks), and it
/// is not a problem.
pub fn check_checkpoints_anchored(
    shard: &str,
    anchor: Option<&Anchor>,
    chain: &[String],
    checkpoints: &[Checkpoint],
    key: &HeadVerifyingKey,
) -> CheckpointCoverage {
    let genesis = super::chain::shard_genesis(shard);
    let key_id = key.key_id();
    let base = anchor.map_or(0, |a| a.seq);
    let n = base + chain.len() as u64;
    let mut out = CheckpointCoverage::default();
    let found = |seq, kind, detail| ChainBreak {
        seq,
        kind,
        detail,
        attempt: None,
        shard: None,
    };
    // (size, root, head, signed_at) of the valid checkpoints to compare with the chain.
    let mut pending: Vec<(u64, &str, &str, &str)> = Vec::new();
    for cp in checkpoints.iter().filter(|c| c.key_id == key_id) {
        out.checked += 1;
        let head = match (cp.check(key), cp.shard(shard)) {
            (Ok(()), Some(head)) => head,
            (Err(e), _) => {
                out.problem.get_or_insert_with(|| {
                    found(
                        cp.shard(shard).map_or(0, |h| h.size),
                        BreakKind::BadSignature,
                        format!(
                            "the checkpoint signed at {} does not verify: {e}",
                            cp.signed_at
                        ),
                    )
                });
                continue;
            }
            (Ok(()), None) if shard != DEFAULT_SHARD => continue,
            (Ok(()), None) => {
                out.problem.get_or_insert_with(|| {
                    found(
                        0,
                        BreakKind::HeadMismatch,
                        format!(
                            "the checkpoint signed at {} has no shard `{DEFAULT_SHARD}`",
                            cp.signed_at
                        ),
                    )
                });
                continue;
            }
        };
        if head.size > n {
            out.problem.get_or_insert_with(|| {
                found(
                    n + 1,
                    BreakKind::Deleted,
                    format!(
                        "the checkpoint signed at {} covers {} records, but the chain holds {n}: truncated",
                        cp.signed_at, head.size
                    ),
                )
            });
            continue;
        }
        pending.push((head.size, &head.root, &head.head, &cp.signed_at));
    }
    pending.sort_by_key(|p| p.0);
    let mut acc = match anchor.map(Anchor::accumulator) {
        None => merkle::Accumulator::new(),
        Some(Some(acc)) => acc,
        Some(None) => {
            out.problem.get_or_insert_with(|| {
                found(
                    base,
                    BreakKind::Malformed,
                    format!(
                        "the anchor of shard `{shard}` at record {base} has an unreadable frontier"
                    ),
                )
            });
            return out;
        }
    };
    let mut anchor_signed = false;
    let mut hashes = chain.iter();
    for (size, root, head, signed_at) in pending {
        if size < base {
            // Only pruned records: checked in the sealed export, not here.
            continue;
        }
        if size == base {
            if anchor.is_some_and(|a| a.hash == head && a.root().is_some_and(|r| r == root)) {
                anchor_signed = true;
                out.last_signed = Some(out.last_signed.map_or(size, |l| l.max(size)));
            } else {
                out.problem.get_or_insert_with(|| {
                    found(
                        size,
                        BreakKind::HeadMismatch,
                        format!(
                            "the anchor of shard `{shard}` at record {size} does not match the checkpoint signed at {signed_at}: the anchor was edited"
                        ),
                    )
                });
            }
            continue;
        }
        let mut readable = true;
        while acc.count() < size {
            match hashes.next().and_then(|h| record_leaf(h)) {
                Some(leaf) => acc.push(leaf),
                None => {
                    readable = false;
                    break;
                }
            }
        }
        let stored_head = usize::try_from(size - base)
            .ok()
            .and_then(|s| s.checked_sub(1))
            .and_then(|i| chain.get(i))
            .map_or(genesis.as_str(), String::as_str);
        if !readable || hex::encode(acc.root()) != root || stored_head != head {
            out.problem.get_or_insert_with(|| {
                found(
                    size,
                    BreakKind::HeadMismatch,
                    format!(
                        "records 1 to {size} do not match the checkpoint signed at {signed_at}: records up to it were rewritten"
                    ),
                )
            });
            if !readable {
                break;
            }
            continue;
        }
        out.last_signed = Some(out.last_signed.map_or(size, |l| l.max(size)));
    }
    if let Some(a) = anchor
        && !anchor_signed
    {
        out.problem.get_or_insert_with(|| {
            found(
                a.seq,
                BreakKind::HeadMismatch,
                format!(
                    "the anchor of shard `{shard}` at record {} matches no checkpoint signed by key {key_id}: records up to it were pruned without a seal this key signed, or the anchor was edited",
                    a.seq
                ),
            )
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Intent;

    fn rows(n: usize) -> Vec<ChainRow> {
        super::super::chain::linked_rows(DEFAULT_SHARD, n)
    }

    #[tokio::test(start_paused = true)]
    async fn periodic_checkpoints_sign_when_the_journal_grew_and_only_then() {
        use crate::journal::MemoryJournal;
        let journal = Arc::new(MemoryJournal::new());
        let append = |n: usize| {
            let journal = Arc::clone(&journal);
            async move {
                for _ in 0..n {
                    let intent = Intent::for_bench(false);
                    journal.write_intent(&intent).await.expect("intent");
                    journal
                        .append(AuditEvent::for_bench(&intent))
                        .await
                        .expect("append");
                }
            }
        };
        let key = HeadSigningKey::generate().expect("key");
        let public = key.verifying_key();
        append(3).await;
        let dyn_journal: Arc<dyn Journal> = journal.clone();
        let periodic = PeriodicCheckpoints::start(dyn_journal, key, Duration::from_secs(60));
        let sizes = || async {
            journal
                .checkpoints()
                .await
                .expect("read")
                .iter()
                .map(|c| c.shard(DEFAULT_SHARD).map_or(0, |h| h.size))
                .collect::<Vec<u64>>()
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(sizes().await, [3], "the first is made at once");
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert_eq!(sizes().await, [3], "nothing appended, nothing signed");
        append(2).await;
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(sizes().await, [3, 5]);
        let report = journal.verify_signed(&public).await.expect("verify");
        assert_eq!((report.first_break, report.last_signed), (None, Some(5)));
        periodic.stop();
        append(1).await;
        tokio::time::sleep(Duration::from_secs(180)).await;
        assert_eq!(sizes().await, [3, 5], "stopped");
    }

    #[test]
    fn one_checkpoint_commits_to_every_shard_and_proves_a_record_of_each() {
        let key = HeadSigningKey::generate().expect("key");
        let vk = key.verifying_key();
        let (default, eu9) = (rows(5), super::super::chain::linked_rows("eu", 9));
        let eu = eu9[..7].to_vec();
        let all: Vec<ChainRow> = default.iter().chain(&eu).cloned().collect();
        let check = ChainCheck::new(all.clone());
        let heads: Vec<ShardHead> = check
            .shard_hashes()
            .map(|(name, hashes)| ShardHead::over(name, hashes).expect("hashes"))
            .collect();
        assert_eq!(heads.len(), 2);
        let cp = Checkpoint::sign(&key, heads, "2026-01-02T00:00:00Z");
        assert_eq!(cp.shard("eu").map(|h| h.size), Some(7));

        // Both shards are covered by it.
        let mut check = ChainCheck::new(all.clone());
        check.check_signed(&[], std::slice::from_ref(&cp), &vk);
        let report = check.into_report();
        assert_eq!(report.first_break, None, "{report:?}");
        assert_eq!(report.shards[1].last_signed, Some(7));

        // A proof for a record of `eu` verifies, and names the shard.
        let proof = InclusionProof::build(&all, "eu", &cp, 4).expect("proof");
        let proven = proof.verify(&vk).expect("verifies");
        assert_eq!((proven.shard.as_str(), proven.seq), ("eu", 4));
        // The same position in the other shard is another record.
        let other = InclusionProof::build(&all, DEFAULT_SHARD, &cp, 4).expect("proof");
        assert_ne!(other.receipt_id, proof.receipt_id);
        // Claimed for the other shard, the `eu` record's path does not reach its root.
        let mut relabelled = proof;
        relabelled.shard = DEFAULT_SHARD.to_owned();
        relabelled.tree_size = 5;
        assert!(relabelled.verify(&vk).is_err());

        // Records of `eu` after the checkpoint are unsigned, in `eu`.
        let longer: Vec<ChainRow> = default.iter().chain(&eu9).cloned().collect();
        let mut check = ChainCheck::new(longer);
        check.check_signed(&[], std::slice::from_ref(&cp), &vk);
        let brk = check.into_report().first_break.expect("unsigned");
        assert_eq!(
            (brk.shard.as_deref(), brk.seq, brk.kind),
            (Some("eu"), 8, BreakKind::Unsigned)
        );

        // A shard the checkpoint predates is no problem for it, only unsigned.
        let old = Checkpoint::sign(
            &key,
            vec![ShardHead::over(DEFAULT_SHARD, &hashes(&default)).expect("hashes")],
            "2026-01-01T00:00:00Z",
        );
        let mut check = ChainCheck::new(all);
        check.check_signed(&[], &[old, cp.clone()], &vk);
        assert_eq!(check.into_report().first_break, None);

        // A record of `eu` rewritten (and the shard rehashed on) after the checkpoint.
        let mut rewritten = eu;
        let mut prev = rewritten[1].hash.clone();
        for (i, row) in rewritten.iter_mut().enumerate().skip(2) {
            row.event_json = row.event_json.replace("2026-01-01", "2026-02-01");
            row.prev_hash = prev.clone();
            row.hash = chain_hash(&prev, i as u64 + 1, &row.event_json);
            prev = row.hash.clone();
        }
        let mut check = ChainCheck::new(default.iter().cloned().chain(rewritten));
        assert!(check.is_intact(), "rehashed, the chain alone links up");
        check.check_signed(&[], std::slice::from_ref(&cp), &vk);
        let brk = check.into_report().first_break.expect("caught");
        assert_eq!(
            (brk.shard.as_deref(), brk.kind),
            (Some("eu"), BreakKind::HeadMismatch)
        );
    }

    fn hashes(rows: &[ChainRow]) -> Vec<String> {
        rows.iter().map(|r| r.hash.clone()).collect()
    }

    fn checkpoint(key: &HeadSigningKey, rows: &[ChainRow]) -> Checkpoint {
        let head = ShardHead::over(DEFAULT_SHARD, &hashes(rows)).expect("hashes");
        Checkpoint::sign(key, vec![head], "2026-01-01T00:00:00Z")
    }

    #[test]
    fn every_record_of_a_checkpointed_chain_proves_with_the_public_key() {
        let key = HeadSigningKey::generate().expect("key");
        for n in [1, 2, 3, 7, 8, 13] {
            let rows = rows(n);
            let cp = checkpoint(&key, &rows);
            for seq in 1..=n as u64 {
                let proof = InclusionProof::build(&rows, DEFAULT_SHARD, &cp, seq).expect("proof");
                let proven = proof.verify(&key.verifying_key()).expect("verifies");
                assert_eq!((proven.seq, proven.tree_size), (seq, n as u64));
                // Through its JSON too.
                let text = serde_json::to_string(&proof).expect("json");
                let back: InclusionProof = serde_json::from_str(&text).expect("parse");
                assert_eq!(back, proof);
            }
        }
    }

    #[test]
    fn a_tampered_proof_fails_with_what_was_changed() {
        let key = HeadSigningKey::generate().expect("key");
        let rows = rows(6);
        let cp = checkpoint(&key, &rows);
        let proof = InclusionProof::build(&rows, DEFAULT_SHARD, &cp, 3).expect("proof");
        let vk = key.verifying_key();
        let fails = |edit: &dyn Fn(&mut InclusionProof)| {
            let mut p = proof.clone();
            edit(&mut p);
            p.verify(&vk).expect_err("tampered")
        };
        // An edited event: its recomputed hash no longer leads to the signed root.
        assert_eq!(
            fails(&|p| p.record.event = p.record.event.replace("bench", "bench2")),
            ProofError::Path
        );
        // An edited previous hash, likewise.
        assert_eq!(
            fails(&|p| p.record.prev_hash = "ab".repeat(32)),
            ProofError::Path
        );
        // Another record swapped in at this position (a reorder).
        assert_eq!(
            fails(&|p| {
                let other = &rows[3];
                p.record.prev_hash = other.prev_hash.clone();
                p.record.event = other.event_json.clone();
                p.record.seq = 4;
                p.receipt_id = serde_json::from_str::<AuditEvent>(&other.event_json)
                    .expect("event")
                    .receipt_id;
            }),
            ProofError::Position {
                seq: 4,
                leaf_index: 2
            }
        );
        assert_eq!(
            fails(&|p| p.leaf_index = 3),
            ProofError::Position {
                seq: 3,
                leaf_index: 3
            }
        );
        let steps = decode_path(&proof.path).expect("path");
        assert_eq!(
            fails(&|p| p.path = encode_path(&steps[..1])),
            ProofError::Path
        );
        assert_eq!(
            fails(&|p| {
                let mut other = steps.clone();
                other[0] = [7_u8; 32];
                p.path = encode_path(&other);
            }),
            ProofError::Path
        );
        // A path not written as `encode_path` writes it: a clear error of its own.
        for (bad, says) in [
            (format!("{}+", &proof.path[1..]), "not unpadded base64url"),
            (format!("{}=", proof.path), "not unpadded base64url"),
            // 4k + 1 characters: a length no byte string has.
            (proof.path[..125].to_owned(), "not unpadded base64url"),
            // 44 characters: 33 bytes.
            (
                proof.path[..44].to_owned(),
                "not a whole number of 32-byte hashes",
            ),
            (
                hex::encode(steps.concat()),
                "not a whole number of 32-byte hashes",
            ),
        ] {
            let e = fails(&|p| p.path.clone_from(&bad));
            assert!(
                matches!(e, ProofError::PathEncoding { .. }) && e.to_string().contains(says),
                "{bad}: {e}"
            );
        }
        assert_eq!(
            fails(&|p| p.tree_size = 5),
            ProofError::TreeSize {
                proof: 5,
                checkpoint: 6
            }
        );
        // The checkpoint's root or size changed: its signature (or root) no longer holds.
        assert_eq!(
            fails(&|p| p.checkpoint.signed_at = "2027-01-01T00:00:00Z".into()),
            ProofError::BadSignature
        );
        assert_eq!(
            fails(&|p| {
                p.checkpoint.signature = key.sign_message(b"something else");
            }),
            ProofError::BadSignature
        );
        assert_eq!(
            fails(&|p| p.checkpoint.shards[0].size = 7),
            ProofError::TreeSize {
                proof: 6,
                checkpoint: 7
            }
        );
        assert_eq!(
            fails(&|p| p.format = "sallyport-inclusion-proof-v9".into()),
            ProofError::Format {
                what: "inclusion proof",
                found: "sallyport-inclusion-proof-v9".into(),
                expected: PROOF_FORMAT
            }
        );
        let other = HeadSigningKey::generate().expect("key");
        assert!(matches!(
            proof.verify(&other.verifying_key()),
            Err(ProofError::OtherKey { .. })
        ));
    }

    #[test]
    fn the_path_encoding_round_trips_every_length() {
        for n in 0..=21 {
            let steps: Vec<Hash> = (0..n).map(|i| [i as u8; 32]).collect();
            let text = encode_path(&steps);
            assert!(!text.contains('=') && !text.contains('+') && !text.contains('/'));
            assert_eq!(decode_path(&text).expect("decodes"), steps);
        }
    }

    /// Issue 39's target: a proof of ≤ 2 KB in a journal of a million records. A tree of
    /// 2^20 leaves (the depth of a million-record chain's middle record, 20 steps), a
    /// realistic event, and the proof written exactly as `sallyport audit prove` writes it
    /// (compact JSON and a newline).
    #[test]
    fn a_proof_in_a_million_record_tree_is_at_most_2_kb_as_written() {
        let key = HeadSigningKey::generate().expect("key");
        let n = 1_usize << 20;
        let seq = 500_000_u64;
        let record = &rows(1)[0];
        let event = record.event_json.clone();
        // Only the proven record needs to be a real one: the others' leaves are any hashes.
        let prev = hex::encode([9_u8; 32]);
        let hash = chain_hash(&prev, seq, &event);
        let mut leaves: Vec<Hash> = (0..n as u64)
            .map(|i| merkle::leaf_hash(&i.to_be_bytes()))
            .collect();
        let index = usize::try_from(seq - 1).expect("index");
        leaves[index] = record_leaf(&hash).expect("leaf");
        let head = ShardHead {
            shard: DEFAULT_SHARD.to_owned(),
            size: n as u64,
            root: hex::encode(merkle::root(&leaves)),
            head: hex::encode([3_u8; 32]),
        };
        let cp = Checkpoint::sign(&key, vec![head], "2026-12-06T06:00:00Z");
        let proof = InclusionProof {
            format: PROOF_FORMAT.to_owned(),
            receipt_id: serde_json::from_str::<AuditEvent>(&event)
                .expect("event")
                .receipt_id,
            shard: DEFAULT_SHARD.to_owned(),
            record: ProvenRecord {
                seq,
                prev_hash: prev,
                event,
            },
            leaf_index: seq - 1,
            tree_size: n as u64,
            path: encode_path(&merkle::path(index, &leaves).expect("path")),
            checkpoint: cp,
        };
        proof.verify(&key.verifying_key()).expect("verifies");
        let written = proof.to_written();
        // The figure BENCHMARKS.md quotes (`-- --nocapture`).
        eprintln!(
            "an inclusion proof in a 2^20-leaf tree: {} bytes as written",
            written.len()
        );
        assert!(
            written.len() <= 2048,
            "{} bytes written: over the 2 KB target",
            written.len()
        );
    }

    #[test]
    fn a_journal_changed_since_its_checkpoint_gives_no_proof() {
        let key = HeadSigningKey::generate().expect("key");
        let original = rows(5);
        let cp = checkpoint(&key, &original);
        // Rewritten: another chain of the same length.
        assert!(matches!(
            InclusionProof::build(&rows(5), DEFAULT_SHARD, &cp, 2),
            Err(ProveError::Rewritten { .. })
        ));
        // Truncated.
        assert!(matches!(
            InclusionProof::build(&original[..4], DEFAULT_SHARD, &cp, 2),
            Err(ProveError::Rewritten { .. })
        ));
        // Not yet covered.
        let mut longer = original.clone();
        longer.extend(rows(1).into_iter().map(|mut r| {
            r.seq = 6;
            r
        }));
        assert!(matches!(
            InclusionProof::build(&longer, DEFAULT_SHARD, &cp, 6),
            Err(ProveError::NotCovered { seq: 6, size: 5 })
        ));
        assert!(matches!(
            InclusionProof::build(&original, "other", &cp, 1),
            Err(ProveError::NoShard(_))
        ));
    }

    #[test]
    fn checkpoints_are_checked_against_the_chain() {
        let key = HeadSigningKey::generate().expect("key");
        let vk = key.verifying_key();
        let rows = rows(6);
        let chain = hashes(&rows);
        let cps = [checkpoint(&key, &rows[..2]), checkpoint(&key, &rows[..5])];
        let ok = check_checkpoints(&chain, &cps, &vk);
        assert_eq!((ok.last_signed, ok.problem, ok.checked), (Some(5), None, 2));

        let mut edited = chain.clone();
        edited[3] = "ab".repeat(32);
        let bad = check_checkpoints(&edited, &cps, &vk);
        let brk = bad.problem.expect("mismatch");
        assert_eq!(
            (brk.seq, brk.kind, bad.last_signed),
            (5, BreakKind::HeadMismatch, Some(2))
        );

        let short = check_checkpoints(&chain[..4], &cps, &vk);
        let brk = short.problem.expect("truncated");
        assert_eq!((brk.seq, brk.kind), (5, BreakKind::Deleted));

        let mut forged = cps[1].clone();
        forged.shards[0] = ShardHead::over(DEFAULT_SHARD, &edited[..5]).expect("hashes");
        let f = check_checkpoints(&edited, &[forged], &vk);
        assert_eq!(f.problem.expect("forged").kind, BreakKind::BadSignature);

        let other = HeadSigningKey::generate().expect("key");
        let none = check_checkpoints(&chain, &cps, &other.verifying_key());
        assert_eq!((none.last_signed, none.checked), (None, 0));
    }

    #[tokio::test]
    async fn a_journal_checkpoints_proves_and_verifies_signed_through_its_checkpoint() {
        use crate::journal::MemoryJournal;
        let journal = MemoryJournal::new();
        let key = HeadSigningKey::generate().expect("key");
        let vk = key.verifying_key();
        let mut receipts = Vec::new();
        for _ in 0..3 {
            let event = AuditEvent::for_bench(&Intent::for_bench(false));
            receipts.push(event.receipt_id.clone());
            journal.append(event).await.expect("append");
        }
        // Nothing signed yet: every record is unsigned.
        let report = journal.verify_signed(&vk).await.expect("verify");
        assert_eq!(
            report.first_break.expect("unsigned").kind,
            BreakKind::Unsigned
        );

        let cp = make_checkpoint(&journal, &key).await.expect("checkpoint");
        assert_eq!(cp.shard(DEFAULT_SHARD).map(|h| h.size), Some(3));
        assert_eq!(journal.checkpoints().await.expect("read"), vec![cp.clone()]);
        let report = journal.verify_signed(&vk).await.expect("verify");
        assert_eq!((report.first_break, report.last_signed), (None, Some(3)));

        let rows = journal.chain_rows().await.expect("rows");
        let proof = InclusionProof::build(&rows, DEFAULT_SHARD, &cp, 2).expect("proof");
        assert_eq!(proof.receipt_id, receipts[1]);
        assert_eq!(proof.verify(&vk).expect("verifies").seq, 2);

        // A record after the checkpoint is reported unsigned until the next one.
        journal
            .append(AuditEvent::for_bench(&Intent::for_bench(false)))
            .await
            .expect("append");
        let report = journal.verify_signed(&vk).await.expect("verify");
        let brk = report.first_break.expect("unsigned");
        assert_eq!(
            (brk.seq, brk.kind, report.last_signed),
            (4, BreakKind::Unsigned, Some(3))
        );
    }

    #[test]
    fn the_checkpoint_signature_is_not_a_head_signature() {
        let key = HeadSigningKey::generate().expect("key");
        let rows = rows(2);
        let cp = checkpoint(&key, &rows);
        // A head signature over the same count and hash does not verify as the checkpoint's.
        let head = key.sign(
            &crate::journal::ChainHead {
                count: 2,
                hash: rows[1].hash.clone(),
            },
            "t",
        );
        let mut swapped = cp.clone();
        swapped.signature = head.signature;
        assert_eq!(
            swapped.check(&key.verifying_key()),
            Err(ProofError::BadSignature)
        );
        assert_eq!(cp.check(&key.verifying_key()), Ok(()));
    }
}
