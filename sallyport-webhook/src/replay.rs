//! The replay guard: the deliveries accepted within the replay window.
//!
//! A delivery is its `(t, v1)` pair. A delivery whose `t` is older than the window is refused
//! as stale before it gets here, so an entry can be forgotten once its `t` leaves the
//! window: the set only ever holds what the window can still admit, and is bounded besides.
//! Pruning moves a floor that only rises, and a delivery stamped below the floor is refused
//! here too, so two requests whose clocks were read a second apart cannot let a forgotten
//! delivery back in.

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};

/// What [`ReplayGuard::admit`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// First time seen; now remembered.
    Fresh,
    /// Already accepted within the window.
    Replayed,
    /// Older than what the guard still remembers (another delivery, checked a moment
    /// later, moved the window past it): it may have been accepted and forgotten, so it is
    /// refused as stale.
    Stale,
    /// The guard holds its maximum of deliveries still inside the window; refusing is the
    /// only answer that cannot let a replay through.
    Full,
}

/// The deliveries accepted within the window, ordered by timestamp for pruning.
#[derive(Debug)]
pub(crate) struct ReplayGuard {
    seen: Mutex<Seen>,
    window_secs: u64,
    capacity: usize,
}

/// The remembered deliveries, and the timestamp below which they were forgotten.
#[derive(Debug, Default)]
struct Seen {
    deliveries: BTreeSet<(u64, [u8; 32])>,
    /// Every delivery stamped before this was pruned; such a stamp is never admitted.
    floor: u64,
}

impl ReplayGuard {
    /// A guard for a window of `window_secs` holding at most `capacity` deliveries.
    pub(crate) fn new(window_secs: u64, capacity: usize) -> Self {
        Self {
            seen: Mutex::new(Seen::default()),
            window_secs,
            capacity,
        }
    }

    /// Checks and remembers delivery `(t, v1)` at `now` (Unix seconds), in one step, so
    /// two copies of one delivery arriving together cannot both be fresh.
    pub(crate) fn admit(&self, t: u64, v1: [u8; 32], now: u64) -> Admission {
        // Every change below is a single insert, remove or split that leaves the set
        // consistent, so a panic elsewhere while the lock was held leaves nothing half done.
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let cutoff = now.saturating_sub(self.window_secs);
        if cutoff > seen.floor {
            seen.floor = cutoff;
            if seen
                .deliveries
                .first()
                .is_some_and(|(oldest, _)| *oldest < cutoff)
            {
                seen.deliveries = seen.deliveries.split_off(&(cutoff, [0; 32]));
            }
        }
        if t < seen.floor {
            return Admission::Stale;
        }
        if seen.deliveries.contains(&(t, v1)) {
            return Admission::Replayed;
        }
        if seen.deliveries.len() >= self.capacity {
            return Admission::Full;
        }
        seen.deliveries.insert((t, v1));
        Admission::Fresh
    }

    /// Forgets delivery `(t, v1)`: it was admitted, but nothing was decided because of a
    /// failure on this side (vault, journal), so the sender's retry of the same delivery
    /// must not be refused as a replay.
    pub(crate) fn forget(&self, t: u64, v1: [u8; 32]) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.deliveries.remove(&(t, v1));
    }

    /// How many deliveries are remembered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .deliveries
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivery_is_fresh_once_then_replayed() {
        let guard = ReplayGuard::new(300, 10);
        assert_eq!(guard.admit(1_000, [1; 32], 1_000), Admission::Fresh);
        assert_eq!(guard.admit(1_000, [1; 32], 1_100), Admission::Replayed);
        assert_eq!(guard.admit(1_000, [2; 32], 1_100), Admission::Fresh);
        assert_eq!(guard.admit(1_001, [1; 32], 1_100), Admission::Fresh);
    }

    #[test]
    fn entries_leave_with_the_window_and_forget_removes_one() {
        let guard = ReplayGuard::new(300, 10);
        assert_eq!(guard.admit(1_000, [1; 32], 1_000), Admission::Fresh);
        assert_eq!(guard.admit(1_200, [2; 32], 1_200), Admission::Fresh);
        assert_eq!(guard.len(), 2);
        // At 1_301 a delivery stamped 1_000 is outside the window (stale before it gets
        // here), so its entry is pruned; 1_200's stays.
        assert_eq!(guard.admit(1_250, [3; 32], 1_301), Admission::Fresh);
        assert_eq!(guard.len(), 2);
        assert_eq!(guard.admit(1_200, [2; 32], 1_301), Admission::Replayed);
        guard.forget(1_200, [2; 32]);
        assert_eq!(guard.admit(1_200, [2; 32], 1_301), Admission::Fresh);
    }

    #[test]
    fn a_delivery_checked_with_an_older_clock_after_its_entry_was_pruned_is_stale() {
        let guard = ReplayGuard::new(300, 10);
        assert_eq!(guard.admit(1_000, [1; 32], 1_000), Admission::Fresh);
        // A later request (clock 1_301) prunes the entry stamped 1_000 ...
        assert_eq!(guard.admit(1_301, [2; 32], 1_301), Admission::Fresh);
        // ... so a replay of it, whose stale check ran a moment earlier (clock 1_300, still
        // inside the window), must not come out fresh.
        assert_eq!(guard.admit(1_000, [1; 32], 1_300), Admission::Stale);
    }

    #[test]
    fn a_full_guard_refuses_new_deliveries_until_the_window_moves() {
        let guard = ReplayGuard::new(300, 2);
        assert_eq!(guard.admit(1_000, [1; 32], 1_000), Admission::Fresh);
        assert_eq!(guard.admit(1_000, [2; 32], 1_000), Admission::Fresh);
        assert_eq!(guard.admit(1_000, [3; 32], 1_000), Admission::Full);
        assert_eq!(guard.admit(1_000, [1; 32], 1_000), Admission::Replayed);
        assert_eq!(guard.admit(1_400, [3; 32], 1_400), Admission::Fresh);
        assert_eq!(guard.len(), 1);
    }
}
