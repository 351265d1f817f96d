//! Attempt rows checked against the audit chain. Backend-neutral: plain values in, a
//! [`ChainBreak`] out.
//!
//! Attempt rows are mutable (their phase moves as a call goes on), so they cannot be hashed
//! into the chain when written. The chain covers them instead: the audit record that closes
//! an attempt states its final phase and status, so a row that disagrees with its record, or
//! claims an outcome no record gives, was edited.

use std::collections::HashMap;

use super::{AttemptId, BreakKind, ChainBreak, Phase};
use crate::outcome::Status;

/// An attempt row as a backend stored it: the columns the chain vouches for, as text, so a
/// row edited to hold anything at all can still be checked.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AttemptRow {
    /// The attempt id.
    pub attempt_id: String,
    /// The stored phase ([`Phase::parse_stored`] reads it).
    pub phase: String,
    /// The stored status, if the attempt has one.
    pub status: Option<String>,
}

impl AttemptRow {
    /// A row read back from storage.
    pub fn new(
        attempt_id: impl Into<String>,
        phase: impl Into<String>,
        status: Option<String>,
    ) -> Self {
        Self {
            attempt_id: attempt_id.into(),
            phase: phase.into(),
            status,
        }
    }

    /// Whether the row is in a phase an attempt that no audit record closes may be in.
    pub fn is_open(&self) -> bool {
        matches!(
            Phase::parse_stored(&self.phase),
            Some(Phase::IntentWritten | Phase::Dispatched)
        )
    }

    /// The phase to report for the row when no audit record closes it: `intent_written` only
    /// when the row says so, `dispatched` otherwise (fail closed: a row claiming an outcome no
    /// record gives may have been sent).
    pub fn unresolved_phase(&self) -> Phase {
        if Phase::parse_stored(&self.phase) == Some(Phase::IntentWritten) {
            Phase::IntentWritten
        } else {
            Phase::Dispatched
        }
    }
}

/// What the chain says about an attempt: the last record that closed it.
#[derive(Debug, Clone)]
pub(crate) struct Closed {
    /// The record's shard, when it is not the default shard.
    pub(crate) shard: Option<String>,
    pub(crate) seq: u64,
    pub(crate) phase: Phase,
    pub(crate) status: Status,
}

/// The first attempt row (in `rows` order) that disagrees with `closed`.
pub(crate) fn check_attempts(
    rows: impl IntoIterator<Item = AttemptRow>,
    closed: &HashMap<String, Closed>,
) -> Option<ChainBreak> {
    rows.into_iter().find_map(|row| {
        let attempt = Some(AttemptId::from_stored(row.attempt_id.clone()));
        match closed.get(&row.attempt_id) {
            Some(c)
                if Phase::parse_stored(&row.phase) != Some(c.phase)
                    || row.status.as_deref() != Some(c.status.as_str()) =>
            {
                Some(ChainBreak {
                    seq: c.seq,
                    kind: BreakKind::AttemptEdited,
                    detail: format!(
                        "attempt {} is stored as {} ({}) but audit record {} closed it as {} ({})",
                        row.attempt_id,
                        row.phase,
                        row.status.as_deref().unwrap_or("no status"),
                        c.seq,
                        c.phase.as_str(),
                        c.status.as_str()
                    ),
                    attempt,
                    shard: c.shard.clone(),
                })
            }
            Some(_) => None,
            None if row.is_open() => None,
            None => Some(ChainBreak {
                seq: 0,
                kind: BreakKind::AttemptEdited,
                detail: format!(
                    "attempt {} is stored as {} but no audit record closes it: it is unresolved",
                    row.attempt_id, row.phase
                ),
                attempt,
                shard: None,
            }),
        }
    })
}
