//! Telling a waiting worker that an approval was decided, so that an approved call is sent
//! as soon as the decision is stored instead of at the worker's next poll
//! ([`ApprovalStore::watch_decisions`](super::ApprovalStore::watch_decisions)).
//!
//! A backend keeps one [`DecisionSignal`] and calls [`DecisionSignal::notify`] whenever it
//! learns that an approval may have been decided (by this process or another one); each
//! worker holds a [`DecisionWatch`] made from it and waits on it between two listings of
//! the approved calls. Notifications coalesce: a watch woken once by ten decisions lists
//! once, and finds all ten.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

/// The sending side of a store's decision notifications: clones share one signal.
#[derive(Clone)]
pub struct DecisionSignal {
    sender: Arc<watch::Sender<u64>>,
}

impl Default for DecisionSignal {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for DecisionSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DecisionSignal")
            .field("watchers", &self.watchers())
            .finish_non_exhaustive()
    }
}

impl DecisionSignal {
    /// A signal nobody watches yet.
    pub fn new() -> Self {
        Self {
            sender: Arc::new(watch::Sender::new(0)),
        }
    }

    /// Wakes every watch made before this call: an approval may have been decided. Call
    /// it once the decision can be read (after its transaction committed).
    pub fn notify(&self) {
        self.sender.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A new watch on this signal. What was notified before it was made counts as seen:
    /// make the watch before reading the approvals it should catch up with.
    pub fn watch(&self) -> DecisionWatch {
        DecisionWatch {
            receiver: Some(self.sender.subscribe()),
        }
    }

    /// How many watches are alive (a backend stops listening when none is).
    pub fn watchers(&self) -> usize {
        self.sender.receiver_count()
    }
}

/// A worker's subscription to a store's decisions: [`DecisionWatch::wait`] returns when an
/// approval was decided since the watch was made or since the last wait returned, or when
/// the fallback timeout passes.
pub struct DecisionWatch {
    /// `None` for a store that cannot tell (every wait sleeps its whole timeout).
    receiver: Option<watch::Receiver<u64>>,
}

impl fmt::Debug for DecisionWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DecisionWatch")
            .field("notified", &self.receiver.is_some())
            .finish_non_exhaustive()
    }
}

impl DecisionWatch {
    /// A watch that is never woken: each wait sleeps its whole timeout. The default of
    /// [`ApprovalStore::watch_decisions`](super::ApprovalStore::watch_decisions), for a
    /// store that cannot tell when something was decided (its worker polls).
    pub fn sleeping() -> Self {
        Self { receiver: None }
    }

    /// Whether a decision can wake this watch (`false` for [`DecisionWatch::sleeping`]).
    pub fn is_notified(&self) -> bool {
        self.receiver.is_some()
    }

    /// Waits until the store notified a decision since this watch was made or since the
    /// last wait returned, or until `timeout` passes. Returns `true` when woken by a
    /// decision, `false` when the timeout passed (or the signal is gone, after which every
    /// wait sleeps).
    pub async fn wait(&mut self, timeout: Duration) -> bool {
        let Some(receiver) = &mut self.receiver else {
            tokio::time::sleep(timeout).await;
            return false;
        };
        match tokio::time::timeout(timeout, receiver.changed()).await {
            Ok(Ok(())) => true,
            Ok(Err(_)) => {
                // The signal was dropped with its store: nothing will wake this watch again.
                self.receiver = None;
                tokio::time::sleep(timeout).await;
                false
            }
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_sleeping_watch_waits_its_whole_timeout() {
        let mut watch = DecisionWatch::sleeping();
        let start = tokio::time::Instant::now();
        assert!(!watch.wait(Duration::from_secs(3600)).await);
        assert_eq!(start.elapsed(), Duration::from_secs(3600));
        assert!(!watch.is_notified());
    }

    #[tokio::test(start_paused = true)]
    async fn a_notification_before_the_wait_is_not_missed_and_several_coalesce() {
        let signal = DecisionSignal::new();
        signal.notify(); // before the watch: counts as seen
        let mut watch = signal.watch();
        assert_eq!(signal.watchers(), 1);
        signal.notify();
        signal.notify();
        let start = tokio::time::Instant::now();
        assert!(watch.wait(Duration::from_secs(3600)).await);
        assert_eq!(start.elapsed(), Duration::ZERO);
        // Both notifications were taken by the one wake-up.
        assert!(!watch.wait(Duration::from_secs(5)).await);
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_notification_during_the_wait_wakes_it_at_once() {
        let signal = DecisionSignal::new();
        let mut watch = signal.watch();
        let notifier = signal.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            notifier.notify();
        });
        let start = tokio::time::Instant::now();
        assert!(watch.wait(Duration::from_secs(3600)).await);
        assert_eq!(start.elapsed(), Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_signal_leaves_a_watch_that_sleeps() {
        let signal = DecisionSignal::new();
        let mut watch = signal.watch();
        drop(signal);
        let start = tokio::time::Instant::now();
        assert!(!watch.wait(Duration::from_secs(7)).await);
        assert_eq!(start.elapsed(), Duration::from_secs(7));
        assert!(!watch.is_notified());
        drop(watch);
    }
}
