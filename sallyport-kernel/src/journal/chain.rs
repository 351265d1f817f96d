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
use super::signing::{HeadVerifyingKey, SignedHead, check_signed_heads};
use super::{AuditEvent, AuditRecord, BreakKind, ChainBreak, ChainHead, VerifyReport};

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

/// One stored audit record as a backend read it, before anything is trusted: the sequence
/// number as stored (possibly edited to anything), the links and the event JSON exactly as
/// stored (the hash covers its bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChainRow {
    /// The stored sequence number.
    pub seq: i64,
    /// The stored previous hash.
    pub prev_hash: String,
    /// The stored hash.
    pub hash: String,
    /// The stored event JSON.
    pub event_json: String,
}

impl ChainRow {
    /// A row read back from storage.
    pub fn new(
        seq: i64,
        prev_hash: impl Into<String>,
        hash: impl Into<String>,
        event_json: impl Into<String>,
    ) -> Self {
        Self {
            seq,
            prev_hash: prev_hash.into(),
            hash: hash.into(),
            event_json: event_json.into(),
        }
    }

    /// The record this row holds, without checking its links (`records()` of a backend).
    ///
    /// # Errors
    ///
    /// When the event JSON is not an audit event.
    pub fn into_record(self) -> Result<AuditRecord, serde_json::Error> {
        Ok(AuditRecord {
            seq: u64::try_from(self.seq).unwrap_or(0),
            event: serde_json::from_str(&self.event_json)?,
            prev_hash: self.prev_hash,
            hash: self.hash,
        })
    }
}

/// A verification in progress: the chain checked link by link when made, then optionally
/// the attempt rows and signed heads against it. The first break found is kept; later
/// checks do not replace it.
#[derive(Debug)]
pub struct ChainCheck {
    report: VerifyReport,
    /// The stored hash of every row, in order (what signed heads are checked against).
    hashes: Vec<String>,
    /// The last record that closed each attempt, for the attempt cross-check.
    closed: HashMap<String, Closed>,
}

impl ChainCheck {
    /// Checks `rows` (in stored sequence order): every sequence number follows the one
    /// before, every row links to its predecessor's hash, every hash matches its content, and
    /// every event reads. Finds edits, deletions, insertions, reorders and unreadable records.
    pub fn new(rows: impl IntoIterator<Item = ChainRow>) -> Self {
        let rows: Vec<ChainRow> = rows.into_iter().collect();
        let head = ChainHead {
            count: rows.len() as u64,
            hash: rows
                .last()
                .map_or_else(|| GENESIS_HASH.to_owned(), |r| r.hash.clone()),
        };
        let stored_hashes: HashSet<&str> = rows.iter().map(|r| r.hash.as_str()).collect();
        let mut closed = HashMap::new();
        let mut first_break = None;
        let mut prev_hash = GENESIS_HASH;
        for (expected_seq, row) in (1_i64..).zip(&rows) {
            let at = u64::try_from(row.seq).unwrap_or(0);
            let brk = |kind, detail: String| ChainBreak {
                seq: at,
                kind,
                detail,
                attempt: None,
            };
            let seq = row.seq;
            if seq != expected_seq {
                let kind = if seq > expected_seq {
                    BreakKind::Deleted
                } else {
                    BreakKind::Inserted
                };
                first_break = Some(brk(
                    kind,
                    format!("expected record {expected_seq}, found record {seq}"),
                ));
                break;
            }
            if row.prev_hash != prev_hash {
                let kind = if stored_hashes.contains(row.prev_hash.as_str()) {
                    BreakKind::Reordered
                } else {
                    BreakKind::Inserted
                };
                first_break = Some(brk(
                    kind,
                    format!("record {seq} does not link to record {}", seq - 1),
                ));
                break;
            }
            if chain_hash(prev_hash, at, &row.event_json) != row.hash {
                first_break = Some(brk(
                    BreakKind::Edited,
                    format!("record {seq} does not match its hash: its content was changed"),
                ));
                break;
            }
            let Ok(parsed) = serde_json::from_str::<AuditEvent>(&row.event_json) else {
                first_break = Some(brk(
                    BreakKind::Malformed,
                    format!("record {seq} is not a readable audit event"),
                ));
                break;
            };
            closed.insert(
                parsed.attempt_id.as_str().to_owned(),
                Closed {
                    seq: at,
                    phase: parsed.phase,
                    status: parsed.status,
                },
            );
            prev_hash = &row.hash;
        }
        Self {
            report: VerifyReport {
                records: head.count,
                head,
                first_break,
                last_signed: None,
            },
            hashes: rows.into_iter().map(|r| r.hash).collect(),
            closed,
        }
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

    /// Checks the signed heads with `key` (see [`check_signed_heads`]): reports the last
    /// signed position and treats records after it as unsigned.
    pub fn check_signed_heads(&mut self, heads: &[SignedHead], key: &HeadVerifyingKey) {
        check_signed_heads(&mut self.report, &self.hashes, heads, key);
    }

    /// Checks the signed heads and checkpoints with `key` (see
    /// [`super::signing::check_signed`]).
    pub fn check_signed(
        &mut self,
        heads: &[SignedHead],
        checkpoints: &[super::checkpoint::Checkpoint],
        key: &HeadVerifyingKey,
    ) {
        super::signing::check_signed(&mut self.report, &self.hashes, heads, checkpoints, key);
    }

    /// The stored hash of every row checked, in order.
    pub fn hashes(&self) -> &[String] {
        &self.hashes
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
