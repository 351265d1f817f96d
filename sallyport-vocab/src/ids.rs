//! The vocabulary every part of the crate shares: identifiers ([`AttemptId`], [`ReceiptId`],
//! [`IdempotencyKey`]), the five [`Status`]es and who decided ([`Origin`]).
//!
//! A leaf: it imports nothing from the crate, so any module may use it without joining an
//! import cycle.

use std::fmt;

use crate::string_enum;
use serde::{Deserialize, Serialize};

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// A fresh, time-ordered id.
            pub fn generate() -> Self {
                let mut buf = uuid::Uuid::encode_buffer();
                let hex = uuid::Uuid::now_v7().simple().encode_lower(&mut buf);
                let mut id = String::with_capacity($prefix.len() + hex.len());
                id.push_str($prefix);
                id.push_str(hex);
                Self(id)
            }

            /// An id read back from storage.
            pub fn from_stored(id: impl Into<String>) -> Self {
                Self(id.into())
            }

            /// The id as a string.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

id_type!(
    /// One execution of one call (`att_…`).
    AttemptId,
    "att_"
);
id_type!(
    /// One parked call's approval (`apr_…`).
    ApprovalId,
    "apr_"
);
id_type!(
    /// One remembered approval (`rem_…`): an approver's standing approval of later calls.
    RememberedId,
    "rem_"
);
id_type!(
    /// The audit record of one call (`rcpt_…`).
    ReceiptId,
    "rcpt_"
);

/// The runtime-generated idempotency key of one attempt. The agent never supplies or sees it as
/// an input.
///
/// A UUID v7 without the process-wide counter: 48 bits of Unix milliseconds followed by 74
/// random bits, in the usual hyphenated form. The random part makes a key unguessable and
/// collisions negligible, as with a v4 key; the time prefix makes keys sort by creation, so the
/// journal's unique index on keys grows at its right edge. A v4 key lands on a random index
/// page instead: once the index outgrows SQLite's page cache every intent reads a cold page and
/// dirties one more, and the cost of a call grows with the journal (measured in
/// `benchmarks/history.md`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// A fresh random key.
    pub fn generate() -> Self {
        let mut buf = uuid::Uuid::encode_buffer();
        let key = uuid::Uuid::new_v7(uuid::Timestamp::now(uuid::NoContext))
            .hyphenated()
            .encode_lower(&mut buf);
        Self(key.to_owned())
    }

    /// A key read back from storage.
    pub fn from_stored(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    /// The key as sent on the wire.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

string_enum! {
    /// The five statuses an agent can be told.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum Status {
        /// The effect is done; `data` is evidence of the new state.
        Completed => "completed",
        /// Accepted, not finished; `next` names the read-only action to check.
        Pending => "pending",
        /// Nothing needed doing.
        AlreadyInDesiredState => "already_in_desired_state",
        /// Definitely not applied; `reason` is safe to show.
        Rejected => "rejected",
        /// May or may not have been applied; never retried blindly.
        Unknown => "unknown",
    }
}

string_enum! {
    /// Who decided a `rejected` or `unknown` result.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum Origin {
        /// The executor declined before sending.
        Executor => "executor",
        /// The upstream (or the transport to it) answered.
        Upstream => "upstream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idempotency_keys_are_random_v7_uuids_that_sort_by_creation() {
        let first = IdempotencyKey::generate();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let keys: Vec<IdempotencyKey> = (0..10_000).map(|_| IdempotencyKey::generate()).collect();
        let parsed = uuid::Uuid::parse_str(first.as_str()).expect("a UUID");
        assert_eq!(parsed.get_version_num(), 7);
        assert_eq!(first.as_str().len(), 36, "hyphenated form");
        // A later millisecond sorts later, so index inserts stay at the right edge.
        assert!(keys.iter().all(|k| *k > first));
        // Within one millisecond the order is random (no counter): the 74 random bits are
        // all random, and 10,000 keys never collide.
        let distinct: std::collections::HashSet<&str> = keys.iter().map(|k| k.as_str()).collect();
        assert_eq!(distinct.len(), keys.len());
        // Take the millisecond that holds the most keys: on a loaded machine the thread can be
        // descheduled right after the first key, so the first key's millisecond may hold few.
        let mut by_ms: std::collections::BTreeMap<&str, Vec<&IdempotencyKey>> = Default::default();
        for key in &keys {
            by_ms.entry(&key.as_str()[..13]).or_default().push(key);
        }
        let same_ms = by_ms
            .into_values()
            .max_by_key(Vec::len)
            .expect("10,000 keys");
        assert!(
            same_ms.len() > 8,
            "some millisecond holds several of 10,000 keys (largest: {})",
            same_ms.len()
        );
        assert!(
            same_ms.windows(2).any(|w| w[0] > w[1]),
            "keys within one millisecond are not counter-ordered"
        );
    }
}
