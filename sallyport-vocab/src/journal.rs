//! The journal's vocabulary: the ids of an attempt, its audit record and its idempotency key,
//! the phases an attempt moves through, spelled the same in the audit JSON and in every
//! backend's attempt rows, and the error a journal reports. `sallyport-kernel`'s `journal`
//! module re-exports them beside the `Journal` trait.

pub use crate::ids::{AttemptId, IdempotencyKey, ReceiptId};
use crate::string_enum;

string_enum! {
    /// The phase an attempt is in.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum Phase {
        /// The call arrived.
        Received => "received",
        /// The executor declined before sending.
        Refused => "refused",
        /// The intent (attempt id, key, fingerprint) is written.
        IntentWritten => "intent_written",
        /// At least one request was handed to the transport.
        Dispatched => "dispatched",
        /// The call ended with an outcome.
        Finished => "finished",
        /// The call's future was dropped before anything was sent.
        CancelledBeforeSend => "cancelled_before_send",
        /// The call's future was dropped after bytes may have left.
        CancelledUnknown => "cancelled_unknown",
        /// The call is parked until a human decides; nothing was sent (the `requested` record of
        /// an approval).
        Deferred => "deferred",
        /// A human's decision on a parked call, or its expiry; nothing was sent.
        Decided => "decided",
    }
}

impl Phase {
    /// Parses a phase as a backend stored it: [`Phase::as_str`], or `unknown`, which builds
    /// before the spelling was unified wrote to attempt rows for [`Phase::CancelledUnknown`].
    pub fn parse_stored(name: &str) -> Option<Self> {
        if name == "unknown" {
            return Some(Self::CancelledUnknown);
        }
        Self::parse(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_phase_serializes_to_exactly_its_name_and_parses_back() {
        for &phase in Phase::ALL {
            let json = serde_json::to_value(phase).expect("serialize");
            assert_eq!(json, serde_json::Value::from(phase.as_str()), "{phase:?}");
            let back: Phase = serde_json::from_value(json).expect("deserialize");
            assert_eq!(back, phase);
            assert_eq!(Phase::parse_stored(phase.as_str()), Some(phase));
        }
        let distinct: std::collections::HashSet<&str> =
            Phase::ALL.iter().map(|p| p.as_str()).collect();
        assert_eq!(distinct.len(), Phase::ALL.len());
    }

    #[test]
    fn all_lists_every_phase_once() {
        // `ALL` follows the declaration: adding a phase breaks this match, so its place in
        // the order an attempt passes through is chosen, not left to chance.
        let position = |phase: Phase| match phase {
            Phase::Received => 0,
            Phase::Refused => 1,
            Phase::IntentWritten => 2,
            Phase::Dispatched => 3,
            Phase::Finished => 4,
            Phase::CancelledBeforeSend => 5,
            Phase::CancelledUnknown => 6,
            Phase::Deferred => 7,
            Phase::Decided => 8,
        };
        for (i, phase) in Phase::ALL.iter().copied().enumerate() {
            assert_eq!(position(phase), i, "{phase:?}");
        }
    }

    #[test]
    fn the_old_attempt_row_spelling_of_cancelled_unknown_still_parses() {
        assert_eq!(
            Phase::parse_stored("unknown"),
            Some(Phase::CancelledUnknown)
        );
        assert_eq!(Phase::CancelledUnknown.as_str(), "cancelled_unknown");
        assert_eq!(Phase::parse_stored("Finished"), None);
        assert_eq!(Phase::parse_stored(""), None);
        // The audit JSON never used the old spelling: serde does not accept it.
        assert!(serde_json::from_str::<Phase>("\"unknown\"").is_err());
    }
}

/// The error a journal backend reports beneath a [`JournalError`] (SQLite's, PostgreSQL's,
/// an I/O error): boxed, so no backend's types appear in the `Journal` trait.
pub type BackendError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A journal error. Never carries a secret value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// The file is not a journal (corrupt or foreign); it was left untouched.
    #[error("{path} is not a readable sallyport journal; it was left untouched")]
    Corrupt {
        /// The file.
        path: String,
        /// What the backend said.
        #[source]
        source: BackendError,
    },
    /// The journal was written by a newer sallyport.
    #[error("journal format {found} is newer than this build understands ({supported})")]
    NewerFormat {
        /// The format found.
        found: i64,
        /// The newest format this build writes.
        supported: i64,
    },
    /// A write failed.
    #[error("journal write failed")]
    Write(#[source] BackendError),
    /// A read failed.
    #[error("journal read failed")]
    Read(#[source] BackendError),
    /// Opening the file failed.
    #[error("cannot open journal {path}")]
    Open {
        /// The file.
        path: String,
        /// What failed.
        #[source]
        source: BackendError,
    },
    /// The writer thread is gone.
    #[error("journal writer stopped")]
    Stopped,
    /// An idempotency key was reused.
    #[error("idempotency key already recorded for another attempt")]
    DuplicateKey,
    /// The writer no longer holds the claim or lease it wrote under: another executor took
    /// the attempt or approval over (its epoch moved on), so this write was refused.
    #[error("the claim on this attempt was taken over by another executor; nothing was written")]
    Fenced,
    /// The backend does not implement this part of the journal.
    #[error("this journal backend does not support {0}")]
    Unsupported(&'static str),
    /// A prune of sealed records was refused: nothing was deleted.
    #[error("nothing was pruned: {reason}")]
    PruneRefused {
        /// Why (the range is not covered by a stored checkpoint, does not match the
        /// records, or the chain is broken).
        reason: String,
    },
}
