//! Capturing the tracing output of the bench's calls, at `TRACE`, to search it for leaks.
//!
//! The subscriber is attached to each call's future ([`tracing::instrument::WithSubscriber`]),
//! not installed globally: the bench neither needs nor disturbs the host's own subscriber, and
//! captures what the executor and the channel log while they run the call.

use std::future::Future;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};

use tracing::Dispatch;
use tracing::instrument::{WithDispatch, WithSubscriber};

/// Everything the bench's calls logged, as text.
#[derive(Clone)]
pub(crate) struct Logs {
    buffer: Arc<Mutex<Vec<u8>>>,
    dispatch: Dispatch,
}

impl std::fmt::Debug for Logs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Logs").finish_non_exhaustive()
    }
}

struct BufferWriter(Arc<Mutex<Vec<u8>>>);

impl io::Write for BufferWriter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// A fresh capture (creating it makes every callsite reconsider its interest).
    pub(crate) fn new() -> Self {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let writer = Arc::clone(&buffer);
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || BufferWriter(Arc::clone(&writer)))
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .finish();
        Self {
            buffer,
            dispatch: Dispatch::new(subscriber),
        }
    }

    /// `future`, logging into this capture while it runs.
    pub(crate) fn capture<F: Future>(&self, future: F) -> WithDispatch<F> {
        future.with_subscriber(self.dispatch.clone())
    }

    /// The length of the text so far (a mark to read from later).
    pub(crate) fn mark(&self) -> usize {
        self.buffer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// The text logged since `mark`.
    pub(crate) fn since(&self, mark: usize) -> String {
        let buffer = self.buffer.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(buffer.get(mark..).unwrap_or_default()).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_captured_future_logs_into_the_buffer_and_others_do_not() {
        let logs = Logs::new();
        let mark = logs.mark();
        logs.capture(async { tracing::trace!(marker = "inside-7f1", "captured") })
            .await;
        async { tracing::error!(marker = "outside-2c9", "not captured") }.await;
        let text = logs.since(mark);
        assert!(text.contains("inside-7f1"), "{text}");
        assert!(!text.contains("outside-2c9"), "{text}");
        assert_eq!(logs.since(logs.mark()), "");
    }
}
