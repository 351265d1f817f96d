//! Chain hashing and verification, shared by every backend: plain rows in, a
//! [`VerifyReport`] out. Nothing here knows how rows are stored.
//!
//! A backend reads its audit rows in sequence order as [`ChainRow`]s and its attempt rows as
//! [`AttemptRow`]s (one consistent read of both), then:
//!
//! ```
//! use sallyport_core::journal::chain::{AttemptRow, ChainCheck, ChainRow};
//!
//! let rows: Vec<ChainRow> = Vec::new(); // SELECT seq, prev_hash, hash, event ORDER BY seq
//! let mut check = ChainCheck::new(rows);
//! if check.is_intact() {
//!     let attempts: Vec<AttemptRow> = Vec::new(); // SELECT attempt_id, phase, status
//!     check.check_attempts(attempts);
//! }
//! let report = check.into_report();
//! assert!(report.is_intact());
//! assert_eq!(report.records, 0);
//! ```

use std::collections::{HashMap, HashSet};

use super::attempts::{Closed, check_attempts};
use super::checkpoint::{DEFAULT_SHARD, ShardHead};
use super::retention::Anchor;
use super::signing::{HeadVerifyingKey, SignedHead};
use super::{AuditEvent, AuditRecord, BreakKind, ChainBreak, ChainHead, ShardReport, VerifyReport};

pub use super::attempts::AttemptRow;

/// The hash before the first record.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The hash of a record: SHA-256 over the previous hash, the sequence number and the event
/// JSON exactly as stored.
pub fn chain_hash(prev_hash: &str, seq: u64, event_json: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(prev_hash.as_bytes());
    h.update(b"\n");
    h.update(itoa::Buffer::new().format(seq).as_bytes());
    h.update(b"\n");
    h.update(event_json.as_bytes());
    crate::hex::hex_lower(&h.finalize())
}

/// The hash before the first record of the shard named `shard`: [`GENESIS_HASH`] for
/// [`DEFAULT_SHARD`] (so the single chain of journals made before shards keeps every hash),
/// SHA-256 over a domain tag and the name for any other. Each shard's chain starts from its
/// own name, so a record cannot be moved to another shard without breaking its link.
pub fn shard_genesis(shard: &str) -> String {
    use sha2::{Digest, Sha256};
    if shard == DEFAULT_SHARD {
        return GENESIS_HASH.to_owned();
    }
    let mut h = Sha256::new();
    h.update(b"sallyport shard genesis v1\n");
    h.update(shard.as_bytes());
    crate::hex::hex_lower(&h.finalize())
}

/// Checks a shard name: 1 to 64 characters, each an ASCII lowercase letter, a digit, `-`,
/// `_` or `.`. The name is stored beside every record of the shard and signed into every
/// checkpoint, so it is kept short and unambiguous.
///
/// # Errors
///
/// A sentence saying what is wrong with it.
pub fn check_shard_name(shard: &str) -> Result<(), String> {
    if shard.is_empty() || shard.len() > 64 {
        return Err(format!(
            "a shard name has 1 to 64 characters, `{}` has {}",
            shard.escape_debug(),
            shard.len()
        ));
    }
    if let Some(c) = shard
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | '.')))
    {
        return Err(format!(
            "a shard name holds only a-z, 0-9, `-`, `_` and `.`; `{}` holds `{}`",
            shard.escape_debug(),
            c.escape_debug()
        ));
    }
    Ok(())
}

/// One stored audit record as a backend read it, before anything is trusted: the shard and
/// sequence number as stored (possibly edited to anything), the links and the event JSON
/// exactly as stored (the hash covers its bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChainRow {
    /// The shard the row is stored in ([`DEFAULT_SHARD`] for a journal without shards).
    pub shard: String,
    /// The stored sequence number (the position within its shard, from 1).
    pub seq: i64,
    /// The stored previous hash.
    pub prev_hash: String,
    /// The stored hash.
    pub hash: String,
    /// The stored event JSON.
    pub event_json: String,
}

impl ChainRow {
    /// A row of the default shard read back from storage.
    pub fn new(
        seq: i64,
        prev_hash: impl Into<String>,
        hash: impl Into<String>,
        event_json: impl Into<String>,
    ) -> Self {
        Self {
            shard: DEFAULT_SHARD.to_owned(),
            seq,
            prev_hash: prev_hash.into(),
            hash: hash.into(),
            event_json: event_json.into(),
        }
    }

    /// The same row, stored in the shard named `shard`.
    #[must_use]
    pub fn in_shard(mut self, shard: impl Into<String>) -> Self {
        self.shard = shard.into();
        self
    }

    /// The record this row holds, without checking its links (`records()` of a backend).
    ///
    /// # Errors
    ///
    /// When the event JSON is not an audit event.
    pub fn into_record(self) -> Result<AuditRecord, serde_json::Error> {
        Ok(AuditRecord {
            shard: self.shard,
            seq: u64::try_from(self.seq).unwrap_or(0),
            event: serde_json::from_str(&self.event_json)?,
            prev_hash: self.prev_hash,
            hash: self.hash,
        })
    }
}

/// One shard's chain as [`ChainCheck`] found it.
#[derive(Debug)]
struct ShardChain {
    /// What the check found: the shard's head, and its first break.
    summary: ShardReport,
    /// The stored hash of every row, in order (what signed heads are checked against).
    hashes: Vec<String>,
    /// Where the shard's remaining rows start when its oldest records were pruned.
    anchor: Option<Anchor>,
}

/// `n` correctly linked rows of the shard named `shard`, each a `for_bench` event of its own
/// attempt dated `2026-01-01T00:00:SS`: what the checkpoint and retention tests build on.
#[cfg(test)]
pub(crate) fn linked_rows(shard: &str, n: usize) -> Vec<ChainRow> {
    let mut prev = shard_genesis(shard);
    (1..=n)
        .map(|i| {
            let mut event = AuditEvent::for_bench(&super::Intent::for_bench(false));
            event.at = format!("2026-01-01T00:00:{:02}Z", i % 60);
            let json = serde_json::to_string(&event).expect("json");
            let hash = chain_hash(&prev, i as u64, &json);
            let row = ChainRow::new(i as i64, prev.clone(), hash.clone(), json).in_shard(shard);
            prev = hash;
            row
        })
        .collect()
}

/// A verification in progress: each shard's chain checked link by link when made, then
/// optionally the attempt rows and signed heads against it. The first break found is kept;
/// later checks do not replace it.
#[derive(Debug)]
pub struct ChainCheck {
    report: VerifyReport,
    /// Every shard's chain, [`DEFAULT_SHARD`] first, then the others by name.
    shards: Vec<ShardChain>,
    /// The last record that closed each attempt, for the attempt cross-check.
    closed: HashMap<String, Closed>,
}

/// The shard's first break, if any: every sequence number follows the one before, every row
/// links to its predecessor's hash (the first to the shard's genesis, or to the anchor's
/// record when the shard's oldest records were pruned), every hash matches its content, and
/// every event reads. Each record read is noted in `closed`.
fn check_shard(
    shard: &str,
    anchor: Option<&Anchor>,
    rows: &[ChainRow],
    closed: &mut HashMap<String, Closed>,
) -> Option<ChainBreak> {
    let stored_hashes: HashSet<&str> = rows.iter().map(|r| r.hash.as_str()).collect();
    let start = anchor.map_or_else(|| shard_genesis(shard), |a| a.hash.clone());
    let base = anchor.map_or(0, |a| i64::try_from(a.seq).unwrap_or(i64::MAX));
    let mut prev_hash = start.as_str();
    let named = shard != DEFAULT_SHARD;
    // "record 3", or "record 3 of shard `eu`" outside the default shard.
    let record = |seq: i64| {
        if named {
            format!("record {seq} of shard `{shard}`")
        } else {
            format!("record {seq}")
        }
    };
    for (expected_seq, row) in (base.saturating_add(1)..).zip(rows) {
        let at = u64::try_from(row.seq).unwrap_or(0);
        let brk = |kind, detail: String| ChainBreak {
            seq: at,
            kind,
            detail,
            attempt: None,
            shard: named.then(|| shard.to_owned()),
        };
        let seq = row.seq;
        if seq != expected_seq {
            let kind = if seq > expected_seq {
                BreakKind::Deleted
            } else {
                BreakKind::Inserted
            };
            return Some(brk(
                kind,
                format!("expected {}, found {}", record(expected_seq), record(seq)),
            ));
        }
        if row.prev_hash != prev_hash {
            let kind = if stored_hashes.contains(row.prev_hash.as_str()) {
                BreakKind::Reordered
            } else {
                BreakKind::Inserted
            };
            let before = if seq == 1 {
                format!("the start of shard `{shard}`")
            } else if seq == base + 1 {
                format!(
                    "the anchor of shard `{shard}` at record {base} (records up to it were pruned)"
                )
            } else {
                format!("record {}", seq - 1)
            };
            return Some(brk(
                kind,
                format!("{} does not link to {before}", record(seq)),
            ));
        }
        if chain_hash(prev_hash, at, &row.event_json) != row.hash {
            return Some(brk(
                BreakKind::Edited,
                format!(
                    "{} does not match its hash: its content was changed",
                    record(seq)
                ),
            ));
        }
        let Ok(parsed) = serde_json::from_str::<AuditEvent>(&row.event_json) else {
            return Some(brk(
                BreakKind::Malformed,
                format!("{} is not a readable audit event", record(seq)),
            ));
        };
        closed.insert(
            parsed.attempt_id.as_str().to_owned(),
            Closed {
                shard: named.then(|| shard.to_owned()),
                seq: at,
                phase: parsed.phase,
                status: parsed.status,
            },
        );
        prev_hash = &row.hash;
    }
    None
}

impl ChainCheck {
    /// Checks `rows` (each shard's in stored sequence order; shards may come in any order or
    /// interleaved): in each shard every sequence number follows the one before, every row
    /// links to its predecessor's hash, every hash matches its content, and every event
    /// reads. Finds edits, deletions, insertions, reorders and unreadable records. A row whose
    /// shard was edited breaks both shards' links.
    pub fn new(rows: impl IntoIterator<Item = ChainRow>) -> Self {
        Self::with_anchors(Vec::new(), rows)
    }

    /// [`ChainCheck::new`] for a journal that pruned sealed records
    /// ([`super::retention`]): the rows of a shard with an anchor start at the record after
    /// the anchor's and the first links to the anchor's hash instead of the shard's genesis.
    /// The anchors are taken as given here; [`ChainCheck::check_signed`] accepts one only
    /// when a checkpoint signed by the key commits to it.
    pub fn with_anchors(
        anchors: impl IntoIterator<Item = Anchor>,
        rows: impl IntoIterator<Item = ChainRow>,
    ) -> Self {
        let anchors: Vec<Anchor> = anchors.into_iter().collect();
        let mut by_shard: Vec<(String, Vec<ChainRow>)> = anchors
            .iter()
            .map(|a| (a.shard.clone(), Vec::new()))
            .collect();
        for row in rows {
            match by_shard.iter_mut().find(|(name, _)| *name == row.shard) {
                Some((_, rows)) => rows.push(row),
                None => by_shard.push((row.shard.clone(), vec![row])),
            }
        }
        if !by_shard.iter().any(|(name, _)| name == DEFAULT_SHARD) {
            by_shard.push((DEFAULT_SHARD.to_owned(), Vec::new()));
        }
        by_shard.sort_by(|a, b| {
            (a.0 != DEFAULT_SHARD, a.0.as_str()).cmp(&(b.0 != DEFAULT_SHARD, b.0.as_str()))
        });
        let mut closed = HashMap::new();
        let mut first_break = None;
        let mut records = 0;
        let mut shards = Vec::with_capacity(by_shard.len());
        for (name, rows) in by_shard {
            let anchor = anchors.iter().find(|a| a.shard == name).cloned();
            let found = check_shard(&name, anchor.as_ref(), &rows, &mut closed);
            if first_break.is_none() {
                first_break.clone_from(&found);
            }
            records += rows.len() as u64;
            let base = anchor.as_ref().map_or(0, |a| a.seq);
            let start = anchor
                .as_ref()
                .map_or_else(|| shard_genesis(&name), |a| a.hash.clone());
            shards.push(ShardChain {
                summary: ShardReport {
                    head: ChainHead {
                        count: base + rows.len() as u64,
                        hash: rows.last().map_or(start, |r| r.hash.clone()),
                    },
                    shard: name,
                    first_break: found,
                    last_signed: None,
                },
                hashes: rows.into_iter().map(|r| r.hash).collect(),
                anchor,
            });
        }
        let mut check = Self {
            report: VerifyReport {
                records,
                head: shards[0].summary.head.clone(),
                first_break,
                last_signed: None,
                shards: Vec::new(),
            },
            shards,
            closed,
        };
        check.sync_report();
        check
    }

    /// Copies each shard's summary into the report (only when the journal has shards other
    /// than the default one, so the report of a journal without shards reads as before).
    fn sync_report(&mut self) {
        self.report.shards = if self.shards.len() > 1 {
            self.shards.iter().map(|s| s.summary.clone()).collect()
        } else {
            Vec::new()
        };
        self.report.last_signed = self.shards[0].summary.last_signed;
    }

    /// Whether no break has been found so far.
    pub fn is_intact(&self) -> bool {
        self.report.is_intact()
    }

    /// Checks attempt rows against the records that close them: a row whose phase or
    /// status differs from its closing record, or that claims an outcome no record gives,
    /// is a [`BreakKind::AttemptEdited`]. Rows are checked in the order given; nothing is
    /// checked when the chain is already broken.
    pub fn check_attempts(&mut self, rows: impl IntoIterator<Item = AttemptRow>) {
        if self.is_intact() {
            self.report.first_break = check_attempts(rows, &self.closed);
        }
    }

    /// Checks the signed heads with `key` (see [`super::signing::check_signed_heads`]): reports the last
    /// signed position and treats records after it as unsigned.
    pub fn check_signed_heads(&mut self, heads: &[SignedHead], key: &HeadVerifyingKey) {
        self.check_signed(heads, &[], key);
    }

    /// Checks the signed heads and checkpoints with `key` (see
    /// [`super::signing::check_signed`]), shard by shard: each shard's heads against its
    /// chain, and each checkpoint's head of the shard against it. The report's first break
    /// is the first shard's problem, the default shard first.
    pub fn check_signed(
        &mut self,
        heads: &[SignedHead],
        checkpoints: &[super::checkpoint::Checkpoint],
        key: &HeadVerifyingKey,
    ) {
        for shard in &mut self.shards {
            let name = shard.summary.shard.as_str();
            let heads: Vec<SignedHead> =
                heads.iter().filter(|h| h.shard == name).cloned().collect();
            let mut report = VerifyReport {
                records: shard.summary.head.count,
                head: shard.summary.head.clone(),
                first_break: shard.summary.first_break.clone(),
                last_signed: None,
                shards: Vec::new(),
            };
            super::signing::check_signed_anchored(
                &mut report,
                name,
                shard.anchor.as_ref(),
                &shard.hashes,
                &heads,
                checkpoints,
                key,
            );
            if let Some(brk) = &mut report.first_break
                && name != DEFAULT_SHARD
            {
                brk.shard.get_or_insert_with(|| name.to_owned());
            }
            shard.summary.last_signed = report.last_signed;
            shard.summary.first_break = report.first_break.clone();
            if self.report.first_break.is_none() {
                self.report.first_break = report.first_break;
            }
        }
        self.sync_report();
    }

    /// The stored hash of every row of the default shard checked, in order.
    pub fn hashes(&self) -> &[String] {
        &self.shards[0].hashes
    }

    /// Each shard's name and the stored hash of every row of it checked, in order: the
    /// default shard first, then the others by name.
    pub fn shard_hashes(&self) -> impl Iterator<Item = (&str, &[String])> {
        self.shards
            .iter()
            .map(|s| (s.summary.shard.as_str(), s.hashes.as_slice()))
    }

    /// Each shard's name and length (its last position: the anchor's, where records were
    /// pruned, plus the rows after it), the default shard first.
    pub fn shard_sizes(&self) -> impl Iterator<Item = (&str, u64)> {
        self.shards
            .iter()
            .map(|s| (s.summary.shard.as_str(), s.summary.head.count))
    }

    /// The anchor the shard named `shard` was checked from, when its oldest records were
    /// pruned.
    pub fn anchor(&self, shard: &str) -> Option<&Anchor> {
        self.shards
            .iter()
            .find(|s| s.summary.shard == shard)
            .and_then(|s| s.anchor.as_ref())
    }

    /// Every shard's head as a checkpoint commits to it (the default shard first), its root
    /// carried on from the anchor where records were pruned. `None` when a stored hash or
    /// an anchor's frontier is unreadable (the chain was damaged).
    pub fn shard_heads(&self) -> Option<Vec<ShardHead>> {
        self.shards
            .iter()
            .map(|s| ShardHead::over_from(&s.summary.shard, s.anchor.as_ref(), &s.hashes))
            .collect()
    }

    /// The report so far.
    pub fn report(&self) -> &VerifyReport {
        &self.report
    }

    /// The report.
    pub fn into_report(self) -> VerifyReport {
        self.report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::AttemptId;
    use crate::journal::signing::HeadSigningKey;
    use crate::journal::{BreakKind, Phase};
    use crate::outcome::Status;

    fn event(attempt: &str, phase: Phase, status: Status) -> AuditEvent {
        let mut event = AuditEvent::for_bench(&crate::journal::Intent::for_bench(false));
        event.attempt_id = AttemptId::from_stored(attempt);
        event.at = "2026-01-01T00:00:00Z".to_owned();
        event.phase = phase;
        event.status = status;
        event
    }

    /// A correctly linked chain of `n` finished, completed records for `att_1`…`att_n`.
    fn chain(n: usize) -> Vec<ChainRow> {
        let mut prev = GENESIS_HASH.to_owned();
        (1..=n)
            .map(|i| {
                let json = serde_json::to_string(&event(
                    &format!("att_{i}"),
                    Phase::Finished,
                    Status::Completed,
                ))
                .expect("json");
                let seq = i as u64;
                let hash = chain_hash(&prev, seq, &json);
                let row = ChainRow::new(i as i64, prev.clone(), hash.clone(), json);
                prev = hash;
                row
            })
            .collect()
    }

    /// A correctly linked chain of `n` records in the shard named `shard`, for attempts
    /// `{shard}_1`…
    fn shard_chain(shard: &str, n: usize) -> Vec<ChainRow> {
        let mut prev = shard_genesis(shard);
        (1..=n)
            .map(|i| {
                let json = serde_json::to_string(&event(
                    &format!("{shard}_{i}"),
                    Phase::Finished,
                    Status::Completed,
                ))
                .expect("json");
                let hash = chain_hash(&prev, i as u64, &json);
                let row = ChainRow::new(i as i64, prev.clone(), hash.clone(), json).in_shard(shard);
                prev = hash;
                row
            })
            .collect()
    }

    /// Rows of several shards, interleaved as a backend storing them by arrival would.
    fn interleaved(shards: &[Vec<ChainRow>]) -> Vec<ChainRow> {
        let longest = shards.iter().map(Vec::len).max().unwrap_or(0);
        (0..longest)
            .flat_map(|i| shards.iter().filter_map(move |s| s.get(i).cloned()))
            .collect()
    }

    #[test]
    fn shards_each_verify_from_their_own_genesis_in_any_interleaving() {
        assert_eq!(shard_genesis(DEFAULT_SHARD), GENESIS_HASH);
        assert_ne!(shard_genesis("eu"), shard_genesis("us"));
        assert_ne!(shard_genesis("eu"), GENESIS_HASH);
        let (default, eu, us) = (chain(3), shard_chain("eu", 4), shard_chain("us", 2));
        let report = ChainCheck::new(interleaved(&[eu.clone(), default, us])).into_report();
        assert_eq!(report.first_break, None, "{report:?}");
        assert_eq!(report.records, 9);
        assert_eq!(report.head.count, 3, "the head is the default shard's");
        let names: Vec<(&str, u64)> = report
            .shards
            .iter()
            .map(|s| (s.shard.as_str(), s.head.count))
            .collect();
        assert_eq!(names, [("default", 3), ("eu", 4), ("us", 2)]);
        assert_eq!(report.shards[1].head.hash, eu[3].hash);
        // A journal with only the default shard reports as it did before shards.
        assert!(ChainCheck::new(chain(2)).into_report().shards.is_empty());
    }

    #[test]
    fn a_record_moved_to_another_shard_or_edited_there_is_found_in_that_shard() {
        // Moved: the last `eu` record relabelled `us` links to nothing in `us`.
        let (eu, us) = (shard_chain("eu", 3), shard_chain("us", 2));
        let mut moved = us;
        let mut taken = eu[2].clone().in_shard("us");
        taken.seq = 3;
        moved.push(taken);
        let report = ChainCheck::new(eu[..2].iter().cloned().chain(moved)).into_report();
        let brk = report.first_break.expect("a break");
        assert_eq!(
            (brk.shard.as_deref(), brk.seq, brk.kind),
            (Some("us"), 3, BreakKind::Inserted)
        );
        assert!(brk.detail.contains("shard `us`"), "{}", brk.detail);
        // A chain copied into a new shard with its links as they were fails at its start.
        let copied: Vec<ChainRow> = eu.iter().cloned().map(|r| r.in_shard("copy")).collect();
        let brk = ChainCheck::new(copied)
            .into_report()
            .first_break
            .expect("a break");
        assert_eq!((brk.shard.as_deref(), brk.seq), (Some("copy"), 1));
        // Edited in a named shard, the default shard intact: the break names the shard.
        let mut edited = shard_chain("eu", 3);
        edited[1].event_json = edited[1].event_json.replace("completed", "rejected");
        let check = ChainCheck::new(chain(2).into_iter().chain(edited));
        let report = check.into_report();
        let brk = report.first_break.clone().expect("a break");
        assert_eq!(
            (brk.shard.as_deref(), brk.seq, brk.kind),
            (Some("eu"), 2, BreakKind::Edited)
        );
        assert_eq!(
            report.shards[0].first_break, None,
            "the default shard is intact"
        );
        assert_eq!(report.shards[1].first_break, Some(brk));
    }

    #[test]
    fn shard_names_are_short_and_plain() {
        for good in ["default", "eu-1", "tenant_42", "group.a", &"x".repeat(64)] {
            assert_eq!(check_shard_name(good), Ok(()), "{good}");
        }
        for bad in ["", "EU", "a b", "a/b", "ü", &"x".repeat(65)] {
            assert!(check_shard_name(bad).is_err(), "{bad:?} passed");
        }
    }

    fn first_break(rows: Vec<ChainRow>) -> (u64, BreakKind) {
        let report = ChainCheck::new(rows).into_report();
        let brk = report.first_break.expect("a break");
        (brk.seq, brk.kind)
    }

    #[test]
    fn an_empty_chain_is_intact_with_the_genesis_head() {
        let report = ChainCheck::new(Vec::new()).into_report();
        assert!(report.is_intact());
        assert_eq!(report.records, 0);
        assert_eq!(
            report.head,
            ChainHead {
                count: 0,
                hash: GENESIS_HASH.to_owned()
            }
        );
    }

    #[test]
    fn an_intact_chain_verifies_and_reports_its_head_and_hashes() {
        let rows = chain(5);
        let last = rows[4].hash.clone();
        let all: Vec<String> = rows.iter().map(|r| r.hash.clone()).collect();
        let check = ChainCheck::new(rows);
        assert_eq!(check.hashes(), all.as_slice());
        let report = check.into_report();
        assert_eq!(report.first_break, None);
        assert_eq!((report.records, report.head.count), (5, 5));
        assert_eq!(report.head.hash, last);
    }

    #[test]
    fn an_edited_event_is_found_at_its_position() {
        let mut rows = chain(5);
        rows[2].event_json = rows[2].event_json.replace("completed", "rejected");
        assert_eq!(first_break(rows), (3, BreakKind::Edited));
    }

    #[test]
    fn a_deleted_row_is_found_where_the_gap_starts() {
        let mut rows = chain(5);
        rows.remove(1);
        assert_eq!(first_break(rows), (3, BreakKind::Deleted));
    }

    #[test]
    fn a_row_that_links_to_no_stored_record_is_inserted() {
        let mut rows = chain(5);
        let forged = serde_json::to_string(&event("att_x", Phase::Finished, Status::Completed))
            .expect("json");
        let fake_prev = "f".repeat(64);
        let hash = chain_hash(&fake_prev, 3, &forged);
        rows[2] = ChainRow::new(3, fake_prev, hash, forged);
        assert_eq!(first_break(rows), (3, BreakKind::Inserted));
    }

    #[test]
    fn a_repeated_sequence_number_is_inserted() {
        let mut rows = chain(3);
        let copy = rows[1].clone();
        rows.insert(2, copy);
        assert_eq!(first_break(rows), (2, BreakKind::Inserted));
    }

    #[test]
    fn swapped_rows_are_reordered() {
        let mut rows = chain(5);
        let (two, three) = (rows[1].clone(), rows[2].clone());
        rows[1] = ChainRow::new(2, three.prev_hash, three.hash, three.event_json);
        rows[2] = ChainRow::new(3, two.prev_hash, two.hash, two.event_json);
        assert_eq!(first_break(rows), (2, BreakKind::Reordered));
    }

    #[test]
    fn a_correctly_hashed_row_that_is_not_an_event_is_malformed() {
        let mut rows = chain(3);
        let prev = rows[1].hash.clone();
        rows[2] = ChainRow::new(
            3,
            prev.clone(),
            chain_hash(&prev, 3, "{\"x\":1}"),
            "{\"x\":1}",
        );
        assert_eq!(first_break(rows), (3, BreakKind::Malformed));
    }

    #[test]
    fn attempt_rows_that_match_their_records_or_are_still_open_pass() {
        let mut check = ChainCheck::new(chain(2));
        check.check_attempts([
            AttemptRow::new("att_1", "finished", Some("completed".to_owned())),
            AttemptRow::new("att_2", "finished", Some("completed".to_owned())),
            AttemptRow::new("att_open", "intent_written", None),
            AttemptRow::new("att_sent", "dispatched", None),
        ]);
        assert_eq!(check.into_report().first_break, None);
    }

    #[test]
    fn an_attempt_row_whose_status_differs_from_its_record_is_attempt_edited() {
        let mut check = ChainCheck::new(chain(2));
        check.check_attempts([
            AttemptRow::new("att_1", "finished", Some("completed".to_owned())),
            AttemptRow::new("att_2", "finished", Some("rejected".to_owned())),
        ]);
        let brk = check.into_report().first_break.expect("a break");
        assert_eq!((brk.seq, brk.kind), (2, BreakKind::AttemptEdited));
        assert_eq!(brk.attempt, Some(AttemptId::from_stored("att_2")));
    }

    #[test]
    fn an_attempt_row_claiming_an_outcome_no_record_gives_is_attempt_edited_at_zero() {
        let mut check = ChainCheck::new(chain(1));
        check.check_attempts([AttemptRow::new(
            "att_9",
            "finished",
            Some("completed".to_owned()),
        )]);
        let brk = check.into_report().first_break.expect("a break");
        assert_eq!((brk.seq, brk.kind), (0, BreakKind::AttemptEdited));
        assert_eq!(brk.attempt, Some(AttemptId::from_stored("att_9")));
    }

    #[test]
    fn attempt_rows_of_either_spelling_of_cancelled_unknown_match_its_record() {
        let json = serde_json::to_string(&event("att_c", Phase::CancelledUnknown, Status::Unknown))
            .expect("json");
        assert!(json.contains("\"phase\":\"cancelled_unknown\""), "{json}");
        let row = ChainRow::new(1, GENESIS_HASH, chain_hash(GENESIS_HASH, 1, &json), json);
        for stored in ["unknown", "cancelled_unknown"] {
            let mut check = ChainCheck::new([row.clone()]);
            check.check_attempts([AttemptRow::new("att_c", stored, Some("unknown".to_owned()))]);
            assert_eq!(check.into_report().first_break, None, "{stored}");
        }
        let mut check = ChainCheck::new([row]);
        check.check_attempts([AttemptRow::new(
            "att_c",
            "finished",
            Some("unknown".to_owned()),
        )]);
        let brk = check.into_report().first_break.expect("a break");
        assert_eq!((brk.seq, brk.kind), (1, BreakKind::AttemptEdited));
    }

    #[test]
    fn attempts_are_not_checked_once_the_chain_is_broken() {
        let mut rows = chain(3);
        rows.remove(0);
        let mut check = ChainCheck::new(rows);
        check.check_attempts([AttemptRow::new("att_9", "finished", None)]);
        let brk = check.into_report().first_break.expect("a break");
        assert_eq!((brk.seq, brk.kind), (2, BreakKind::Deleted));
    }

    #[test]
    fn signed_heads_are_checked_against_the_rows_hashes() {
        let key = HeadSigningKey::generate().expect("key");
        let rows = chain(4);
        let at_three = ChainHead {
            count: 3,
            hash: rows[2].hash.clone(),
        };
        let heads = [key.sign(&at_three, "2026-01-01T00:00:00Z")];
        let mut check = ChainCheck::new(rows);
        check.check_signed_heads(&heads, &key.verifying_key());
        let report = check.into_report();
        assert_eq!(report.last_signed, Some(3));
        let brk = report.first_break.expect("record 4 is unsigned");
        assert_eq!((brk.seq, brk.kind), (4, BreakKind::Unsigned));
    }

    #[test]
    fn a_row_reads_back_as_its_record() {
        let row = chain(1).remove(0);
        let record = row.clone().into_record().expect("record");
        assert_eq!(record.seq, 1);
        assert_eq!((record.prev_hash, record.hash), (row.prev_hash, row.hash));
        assert_eq!(record.event.attempt_id.as_str(), "att_1");
        assert!(
            ChainRow::new(1, GENESIS_HASH, "h", "[]")
                .into_record()
                .is_err()
        );
    }
}
