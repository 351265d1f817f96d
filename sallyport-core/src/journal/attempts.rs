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

/// An attempt row as stored.
#[derive(Debug)]
pub(crate) struct AttemptRow {
    pub(crate) attempt_id: String,
    pub(crate) phase: String,
    pub(crate) status: Option<String>,
}

/// What the chain says about an attempt: the last record that closed it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Closed {
    pub(crate) seq: u64,
    pub(crate) phase: Phase,
    pub(crate) status: Status,
}

/// The first attempt row (in `rows` order) that disagrees with `closed`.
pub(crate) fn check_attempts(
    rows: &[AttemptRow],
    closed: &HashMap<String, Closed>,
) -> Option<ChainBreak> {
    rows.iter().find_map(|row| {
        let attempt = Some(AttemptId::from_stored(row.attempt_id.clone()));
        match closed.get(&row.attempt_id) {
            Some(c)
                if row.phase != c.phase.as_str()
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
                })
            }
            Some(_) => None,
            None if is_open(&row.phase) => None,
            None => Some(ChainBreak {
                seq: 0,
                kind: BreakKind::AttemptEdited,
                detail: format!(
                    "attempt {} is stored as {} but no audit record closes it: it is unresolved",
                    row.attempt_id, row.phase
                ),
                attempt,
            }),
        }
    })
}

/// Whether a stored phase is one an attempt without an audit record may be in.
fn is_open(phase: &str) -> bool {
    phase == Phase::IntentWritten.as_str() || phase == Phase::Dispatched.as_str()
}
