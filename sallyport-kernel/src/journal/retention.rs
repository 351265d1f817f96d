//! Retention: seal a shard's oldest records behind a signed checkpoint, export them, prune
//! them from the journal, and keep both halves verifiable.
//!
//! A **seal** of shard S up to record N is a signed [`Checkpoint`] whose head for S has size
//! N. `sallyport audit seal` makes a fresh checkpoint, so N is the shard's length at that
//! moment, then:
//!
//! 1. writes the records after the previous seal up to N as a [`SealedRange`]
//!    (`sallyport-sealed-range-v1`, JSON lines), which [`SealedRange::verify`] checks with
//!    the public key alone;
//! 2. prunes them from the journal ([`super::Journal::prune_sealed`]), which keeps an
//!    [`Anchor`] in their place: record N's position and hash, and the Merkle
//!    [`Accumulator`] state after N leaves (its frontier: one subtree root per set bit of N).
//!
//! What remains verifies from the anchor: [`super::chain::ChainCheck::with_anchors`] links
//! record N + 1 to the anchor's hash, checkpoints longer than N carry their root on from the
//! frontier, and inclusion proofs of later records take the pruned part of the tree from it
//! ([`super::checkpoint::InclusionProof::build_from`]). An anchor is trusted only when a
//! checkpoint signed by the verifying key commits to exactly it (its size, its head and the
//! root its frontier gives): someone who can write the database but does not hold the key
//! can neither move the anchor nor change its frontier unnoticed by `verify_signed`.
//!
//! Sealing exactly at a checkpoint (rather than at any N at or below one) keeps that check
//! one comparison: the checkpoint's root is the frontier's root, with no pruned record
//! needed to recompute it.

use serde::{Deserialize, Serialize};

use super::chain::{ChainCheck, ChainRow, chain_hash, shard_genesis};
use super::checkpoint::{Checkpoint, ProofError, record_leaf};
use super::merkle::{Accumulator, Hash};
use super::signing::HeadVerifyingKey;
use super::{AuditEvent, JournalError};

/// The `format` of a sealed range's header line.
pub const SEALED_RANGE_FORMAT: &str = "sallyport-sealed-range-v1";

/// Where a shard's remaining records start after its oldest were pruned: the last pruned
/// record's position and hash, and the Merkle frontier after it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Anchor {
    /// The shard.
    pub shard: String,
    /// The last pruned record's position (records 1 to `seq` are gone).
    pub seq: u64,
    /// Its chain hash (hex): what record `seq + 1` links to.
    pub hash: String,
    /// The [`Accumulator::frontier`] after `seq` leaves, hex, largest subtree first.
    pub frontier: Vec<String>,
}

impl Anchor {
    /// The start of the shard named `shard`: nothing pruned (position 0, the shard's
    /// genesis hash, an empty frontier).
    pub fn genesis(shard: impl Into<String>) -> Self {
        let shard = shard.into();
        Self {
            hash: shard_genesis(&shard),
            shard,
            seq: 0,
            frontier: Vec::new(),
        }
    }

    /// The anchor after record `seq` of `shard`, whose hash is `hash`, with the Merkle
    /// state `acc` (which must have seen `seq` leaves).
    pub fn new(shard: impl Into<String>, hash: impl Into<String>, acc: &Accumulator) -> Self {
        Self {
            shard: shard.into(),
            seq: acc.count(),
            hash: hash.into(),
            frontier: acc.frontier().iter().map(hex::encode).collect(),
        }
    }

    /// The Merkle state it stands for; `None` when the frontier is not one hash (64 hex
    /// digits) per set bit of `seq`.
    pub fn accumulator(&self) -> Option<Accumulator> {
        let roots = self
            .frontier
            .iter()
            .map(|h| {
                let mut bytes: Hash = [0; 32];
                hex::decode_to_slice(h, &mut bytes).ok().map(|()| bytes)
            })
            .collect::<Option<Vec<Hash>>>()?;
        Accumulator::from_frontier(self.seq, &roots)
    }

    /// The Merkle root (hex) over records 1 to `seq`, from the frontier.
    pub fn root(&self) -> Option<String> {
        self.accumulator().map(|a| hex::encode(a.root()))
    }

    /// Whether `checkpoint` commits to this anchor: its head for the shard has this size,
    /// this hash, and the root the frontier gives. The signature is not checked here.
    pub fn is_committed_by(&self, checkpoint: &Checkpoint) -> bool {
        checkpoint.shard(&self.shard).is_some_and(|h| {
            h.size == self.seq && h.head == self.hash && self.root().is_some_and(|r| r == h.root)
        })
    }
}

/// One record of a sealed range, exactly as the journal stored it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct SealedRecord {
    /// The shard.
    pub shard: String,
    /// Its position in the shard.
    pub seq: u64,
    /// The hash of the record before it.
    pub prev_hash: String,
    /// Its chain hash as stored.
    pub hash: String,
    /// The event JSON byte for byte as stored and hashed.
    pub event: String,
}

/// The first line of a sealed range: what the records after it must add up to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct SealedHeader {
    /// [`SEALED_RANGE_FORMAT`].
    pub format: String,
    /// The shard.
    pub shard: String,
    /// The first record's position.
    pub first_seq: u64,
    /// The last record's position: the checkpoint's size for the shard.
    pub last_seq: u64,
    /// The hash before the first record (the shard's genesis when `first_seq` is 1).
    pub prev_hash: String,
    /// The Merkle frontier (hex) after `first_seq - 1` records: the previous seal's.
    pub frontier: Vec<String>,
    /// The signed checkpoint that seals the range.
    pub checkpoint: Checkpoint,
}

/// A sealed range of one shard's records: the export `sallyport audit seal` writes before it
/// prunes them. Checked with the public key alone ([`SealedRange::verify`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SealedRange {
    /// The header line.
    pub header: SealedHeader,
    /// The records, in order.
    pub records: Vec<SealedRecord>,
}

/// What a verified sealed range shows.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Sealed {
    /// The shard.
    pub shard: String,
    /// The first record's position.
    pub first_seq: u64,
    /// The last record's position.
    pub last_seq: u64,
    /// When the checkpoint was signed.
    pub signed_at: String,
    /// The key that signed it.
    pub key_id: String,
    /// The anchor the journal keeps after pruning the range.
    pub anchor: Anchor,
}

impl SealedRange {
    /// The range of shard `shard` from the record after `before` up to the checkpoint's
    /// size for the shard, out of `rows` (the journal's rows; other shards' are passed
    /// over). Returns it with the anchor that follows it. The rows are checked against the
    /// checkpoint: a journal that does not match it gives no range.
    ///
    /// # Errors
    ///
    /// [`SealError`] saying what does not match.
    pub fn build(
        before: &Anchor,
        rows: &[ChainRow],
        checkpoint: &Checkpoint,
    ) -> Result<(Self, Anchor), SealError> {
        let shard = before.shard.as_str();
        let head = checkpoint
            .shard(shard)
            .ok_or_else(|| SealError::Nothing(format!("the checkpoint has no shard `{shard}`")))?;
        if head.size <= before.seq {
            return Err(SealError::Nothing(format!(
                "shard `{shard}` has no record after record {} to seal",
                before.seq
            )));
        }
        let mut acc = before.accumulator().ok_or_else(|| {
            SealError::Mismatch(format!(
                "the anchor of shard `{shard}` has an unreadable frontier"
            ))
        })?;
        let mut records = Vec::new();
        let mut prev = before.hash.clone();
        for row in rows
            .iter()
            .filter(|r| r.shard == shard)
            .take(usize::try_from(head.size - before.seq).unwrap_or(usize::MAX))
        {
            let seq = before.seq + records.len() as u64 + 1;
            if u64::try_from(row.seq).ok() != Some(seq)
                || row.prev_hash != prev
                || chain_hash(&prev, seq, &row.event_json) != row.hash
            {
                return Err(SealError::Mismatch(format!(
                    "record {seq} of shard `{shard}` is missing or does not link: verify the journal"
                )));
            }
            acc.push(record_leaf(&row.hash).ok_or_else(|| {
                SealError::Mismatch(format!("record {seq} has no readable hash"))
            })?);
            prev.clone_from(&row.hash);
            records.push(SealedRecord {
                shard: shard.to_owned(),
                seq,
                prev_hash: row.prev_hash.clone(),
                hash: row.hash.clone(),
                event: row.event_json.clone(),
            });
        }
        if acc.count() != head.size || hex::encode(acc.root()) != head.root || prev != head.head {
            return Err(SealError::Mismatch(format!(
                "records {} to {} of shard `{shard}` do not match the checkpoint",
                before.seq + 1,
                head.size
            )));
        }
        let anchor = Anchor::new(shard, prev, &acc);
        Ok((
            Self {
                header: SealedHeader {
                    format: SEALED_RANGE_FORMAT.to_owned(),
                    shard: shard.to_owned(),
                    first_seq: before.seq + 1,
                    last_seq: head.size,
                    prev_hash: before.hash.clone(),
                    frontier: before.frontier.clone(),
                    checkpoint: checkpoint.clone(),
                },
                records,
            },
            anchor,
        ))
    }

    /// The file's text: the header line, then one line per record, each line compact JSON
    /// ended by a newline.
    pub fn to_json_lines(&self) -> String {
        let mut out = serde_json::to_string(&self.header).unwrap_or_default();
        out.push('\n');
        for record in &self.records {
            out.push_str(&serde_json::to_string(record).unwrap_or_default());
            out.push('\n');
        }
        out
    }

    /// Reads a file written by [`SealedRange::to_json_lines`]. Every line must be there and
    /// end with a newline, so a file cut anywhere does not read.
    ///
    /// # Errors
    ///
    /// [`SealedRangeError::Malformed`] naming the first line that does not read.
    pub fn parse(text: &str) -> Result<Self, SealedRangeError> {
        let malformed = |line: usize, detail: String| SealedRangeError::Malformed { line, detail };
        let Some(body) = text.strip_suffix('\n') else {
            return Err(malformed(
                text.lines().count().max(1),
                "the file does not end with a newline: it was cut short".to_owned(),
            ));
        };
        let mut lines = body.split('\n');
        let first = lines.next().unwrap_or_default();
        let header: SealedHeader = serde_json::from_str(first)
            .map_err(|e| malformed(1, format!("not a sealed range header: {e}")))?;
        let records = lines
            .enumerate()
            .map(|(i, line)| {
                serde_json::from_str::<SealedRecord>(line)
                    .map_err(|e| malformed(i + 2, format!("not a sealed record: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { header, records })
    }

    /// Checks the range with the public key alone: the format, the checkpoint's signature,
    /// that the records are positions `first_seq` to `last_seq` of the shard with nothing
    /// missing, repeated or reordered, that each links to the one before (the first to the
    /// header's `prev_hash`) and matches its hash, that they and the header's frontier hash
    /// to the checkpoint's root for the shard, and that the last is its head.
    ///
    /// # Errors
    ///
    /// The first thing found wrong ([`SealedRangeError`]).
    pub fn verify(&self, key: &HeadVerifyingKey) -> Result<Sealed, SealedRangeError> {
        let h = &self.header;
        if h.format != SEALED_RANGE_FORMAT {
            return Err(SealedRangeError::Format {
                found: h.format.clone(),
            });
        }
        h.checkpoint
            .check(key)
            .map_err(SealedRangeError::Checkpoint)?;
        let head = h.checkpoint.shard(&h.shard).ok_or_else(|| {
            SealedRangeError::Range(format!("the checkpoint has no shard `{}`", h.shard))
        })?;
        if h.first_seq == 0 || h.last_seq < h.first_seq || h.last_seq != head.size {
            return Err(SealedRangeError::Range(format!(
                "the header says records {} to {}, but the checkpoint covers records 1 to {}",
                h.first_seq, h.last_seq, head.size
            )));
        }
        let before = Anchor {
            shard: h.shard.clone(),
            seq: h.first_seq - 1,
            hash: h.prev_hash.clone(),
            frontier: h.frontier.clone(),
        };
        if before.seq == 0
            && (before.hash != shard_genesis(&h.shard) || !before.frontier.is_empty())
        {
            return Err(SealedRangeError::Range(format!(
                "a range from record 1 starts at the genesis of shard `{}` with an empty frontier",
                h.shard
            )));
        }
        let mut acc = before.accumulator().ok_or_else(|| {
            SealedRangeError::Range(format!(
                "the header's frontier is not one hash per set bit of {}",
                before.seq
            ))
        })?;
        let expected = h.last_seq - h.first_seq + 1;
        if self.records.len() as u64 != expected {
            return Err(SealedRangeError::Range(format!(
                "the header says {expected} records, the file holds {}: records were removed or added",
                self.records.len()
            )));
        }
        let mut prev = before.hash;
        for (seq, r) in (h.first_seq..).zip(&self.records) {
            let broken = |detail: String| SealedRangeError::Record { seq, detail };
            if r.shard != h.shard || r.seq != seq {
                return Err(broken(format!(
                    "expected record {seq} of shard `{}`, found record {} of shard `{}`: reordered or moved",
                    h.shard, r.seq, r.shard
                )));
            }
            if r.prev_hash != prev {
                return Err(broken(format!(
                    "record {seq} does not link to the record before it"
                )));
            }
            if chain_hash(&prev, seq, &r.event) != r.hash {
                return Err(broken(format!(
                    "record {seq} does not match its hash: its content was changed"
                )));
            }
            if serde_json::from_str::<AuditEvent>(&r.event).is_err() {
                return Err(broken(format!(
                    "record {seq} is not a readable audit event"
                )));
            }
            acc.push(record_leaf(&r.hash).ok_or_else(|| broken("no readable hash".to_owned()))?);
            prev.clone_from(&r.hash);
        }
        if hex::encode(acc.root()) != head.root || prev != head.head {
            return Err(SealedRangeError::Root);
        }
        Ok(Sealed {
            shard: h.shard.clone(),
            first_seq: h.first_seq,
            last_seq: h.last_seq,
            signed_at: h.checkpoint.signed_at.clone(),
            key_id: h.checkpoint.key_id.clone(),
            anchor: Anchor::new(h.shard.clone(), prev, &acc),
        })
    }
}

/// Why no sealed range could be made from a journal.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SealError {
    /// There is nothing to seal.
    #[error("nothing to seal: {0}")]
    Nothing(String),
    /// The journal does not match the checkpoint.
    #[error("the journal does not match the checkpoint: {0}")]
    Mismatch(String),
}

/// Why a sealed range does not verify.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum SealedRangeError {
    /// A line does not read.
    #[error("line {line} of the sealed range does not read: {detail}")]
    Malformed {
        /// The line (from 1).
        line: usize,
        /// What is wrong with it.
        detail: String,
    },
    /// Not a format this version reads.
    #[error(
        "not a sealed range this sallyport reads: format `{found}`, expected `{SEALED_RANGE_FORMAT}`"
    )]
    Format {
        /// The format the header names.
        found: String,
    },
    /// The checkpoint does not verify with the key.
    #[error("the sealing checkpoint does not verify")]
    Checkpoint(#[source] ProofError),
    /// The header's range does not agree with the checkpoint or the records.
    #[error("the sealed range is not whole: {0}")]
    Range(String),
    /// A record is out of place, unlinked or edited.
    #[error("record {seq} of the sealed range is broken: {detail}")]
    Record {
        /// The position expected.
        seq: u64,
        /// What is wrong.
        detail: String,
    },
    /// The records and the frontier do not hash to the checkpoint's root and head.
    #[error(
        "the records do not hash to the checkpoint's root and head: the header's frontier or previous hash, or a record, was changed"
    )]
    Root,
}

/// What a backend deletes when it prunes a sealed range ([`plan_prune`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PrunePlan {
    /// How many records of the shard go (those after the previous anchor, up to the new).
    pub records: u64,
    /// The attempts whose every record is pruned: their attempt rows go with them, so the
    /// attempt cross-check of `verify` and `unresolved` do not report attempts whose closing
    /// record is gone. An attempt with a record after the anchor keeps its row.
    pub attempts: Vec<String>,
}

/// Checks, inside the backend's transaction, that `anchor` may replace the records it seals,
/// and says what to delete. `anchors` are the journal's stored anchors, `rows` every audit
/// row (all shards), `checkpoints` the stored checkpoints. Refused unless the shard's chain
/// is intact from its current anchor, the anchor lies after it and within the chain, the
/// pruned records hash to exactly the anchor's hash and frontier, and a stored checkpoint
/// commits to the anchor ([`Anchor::is_committed_by`]; its signature is for `verify_signed`
/// to check: a backend holds no key).
///
/// # Errors
///
/// [`JournalError::PruneRefused`] saying why.
pub fn plan_prune(
    anchors: &[Anchor],
    rows: &[ChainRow],
    checkpoints: &[Checkpoint],
    anchor: &Anchor,
) -> Result<PrunePlan, JournalError> {
    let refuse = |reason: String| JournalError::PruneRefused { reason };
    let shard = anchor.shard.as_str();
    super::chain::check_shard_name(shard).map_err(refuse)?;
    let previous = anchors
        .iter()
        .find(|a| a.shard == shard)
        .cloned()
        .unwrap_or_else(|| Anchor::genesis(shard));
    if anchor.seq <= previous.seq {
        return Err(refuse(format!(
            "records 1 to {} of shard `{shard}` are already pruned",
            previous.seq
        )));
    }
    if !checkpoints.iter().any(|c| anchor.is_committed_by(c)) {
        return Err(refuse(format!(
            "no stored checkpoint covers records 1 to {} of shard `{shard}` with this anchor: make a checkpoint first",
            anchor.seq
        )));
    }
    // This shard's rows alone: another shard's break, reported first, must not hide one here.
    let check = ChainCheck::with_anchors(
        anchors.to_vec(),
        rows.iter().filter(|r| r.shard == shard).cloned(),
    );
    if let Some(brk) = check.report().first_break.as_ref() {
        return Err(refuse(format!(
            "the chain of shard `{shard}` is broken at record {}: {}",
            brk.seq, brk.detail
        )));
    }
    let mut acc = previous.accumulator().ok_or_else(|| {
        refuse(format!(
            "the stored anchor of shard `{shard}` has an unreadable frontier"
        ))
    })?;
    let mut last = previous.hash.clone();
    let mut pruned = std::collections::HashSet::new();
    let mut kept = std::collections::HashSet::new();
    for row in rows {
        let attempt = serde_json::from_str::<AuditEvent>(&row.event_json)
            .map(|e| e.attempt_id.as_str().to_owned())
            .unwrap_or_default();
        let seq = u64::try_from(row.seq).unwrap_or(0);
        if row.shard == shard && seq <= anchor.seq {
            acc.push(
                record_leaf(&row.hash)
                    .ok_or_else(|| refuse(format!("record {seq} has no readable hash")))?,
            );
            last.clone_from(&row.hash);
            pruned.insert(attempt);
        } else {
            kept.insert(attempt);
        }
    }
    if acc.count() != anchor.seq {
        return Err(refuse(format!(
            "shard `{shard}` holds {} records, fewer than the {} to prune",
            acc.count(),
            anchor.seq
        )));
    }
    if Anchor::new(shard, last, &acc) != *anchor {
        return Err(refuse(format!(
            "records up to {} of shard `{shard}` do not hash to the anchor's hash and frontier",
            anchor.seq
        )));
    }
    let mut attempts: Vec<String> = pruned.difference(&kept).cloned().collect();
    attempts.sort();
    Ok(PrunePlan {
        records: anchor.seq - previous.seq,
        attempts,
    })
}

#[cfg(test)]
mod tests;
