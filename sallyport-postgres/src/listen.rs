//! Decisions reach a waiting worker when they commit
//! ([`ApprovalStore::watch_decisions`](sallyport_core::journal::ApprovalStore::watch_decisions)).
//!
//! Every decision's transaction (an approval, a denial, an approval a quorum counts) runs
//! `pg_notify('sallyport_approvals', approval_id)` (`approvals.rs`), which the server
//! delivers only when that transaction commits. While some worker watches, the journal holds
//! one connection of its own, outside the pool (a pooled connection drops notifications),
//! named `sallyport-approval-listener` in `pg_stat_activity`, that runs
//! `LISTEN sallyport_approvals` and wakes the watches on each notification.
//!
//! A connection lost (the server restarted, the backend terminated, the network cut) is
//! made again, at once and then with a backoff up to 2 s; once it listens again the
//! watches are woken, so the worker lists everything and nothing decided while no
//! connection listened is missed. Every 5 s the connection answers an empty query or is
//! taken as lost (a half-open TCP connection says nothing otherwise); it is also taken as
//! lost when one of the journal's writes was refused as read-only since it was made (it may
//! be to an old primary a failover left running read-only, which no decision on the new
//! primary notifies). The task stops when no watch is left.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use sallyport_core::journal::{DecisionSignal, DecisionWatch};
use tokio::task::JoinHandle;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{AsyncMessage, Socket};

use crate::error::{PostgresError, Redactor};

/// The channel every decision notifies.
pub(crate) const CHANNEL: &str = "sallyport_approvals";

/// The listening connection's `application_name`.
pub(crate) const APPLICATION_NAME: &str = "sallyport-approval-listener";

/// How often the listening task checks that a watch is left and the connection answers.
const CHECK_EVERY: Duration = Duration::from_secs(5);

/// How long the check's empty query may take before the connection is taken as lost.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// The first wait after a failed connection attempt; doubled up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(50);

/// The longest wait between two connection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The journal's watches and the task that listens for them.
pub(crate) struct Listener {
    config: tokio_postgres::Config,
    #[cfg(feature = "tls")]
    tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
    redactor: Redactor,
    signal: DecisionSignal,
    /// The listening task while it runs; held while a watch is made and while the task
    /// decides to stop, so a new watch never finds a task about to stop.
    task: Mutex<Option<JoinHandle<()>>>,
}

/// Why one listening connection ended.
enum Ended {
    /// No watch is left: the task stops.
    Unwatched,
    /// The connection was lost: make another.
    Lost(Option<PostgresError>),
}

impl Listener {
    /// A listener for the server `config` names (the journal's own settings), connecting
    /// nothing until the first watch.
    pub(crate) fn new(
        mut config: tokio_postgres::Config,
        #[cfg(feature = "tls")] tls: Option<rustls::ClientConfig>,
        redactor: Redactor,
    ) -> Self {
        config.application_name(APPLICATION_NAME);
        Self {
            config,
            #[cfg(feature = "tls")]
            tls: tls.map(tokio_postgres_rustls::MakeRustlsConnect::new),
            redactor,
            signal: DecisionSignal::new(),
            task: Mutex::new(None),
        }
    }

    /// `task`; it holds one handle, so a poisoned lock is taken over.
    fn task(&self) -> MutexGuard<'_, Option<JoinHandle<()>>> {
        self.task.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new watch, starting the listening task (on the current tokio runtime) if it does
    /// not run. Outside a runtime the watch sleeps (the worker then polls at its interval).
    pub(crate) fn watch(self: &Arc<Self>) -> DecisionWatch {
        let mut task = self.task();
        let watch = self.signal.watch();
        // A task that ended on its own (it panicked) is started again.
        if task.as_ref().is_none_or(JoinHandle::is_finished) {
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                return DecisionWatch::sleeping();
            };
            *task = Some(runtime.spawn(listen(Arc::clone(self))));
        }
        watch
    }

    /// Stops the listening task (the journal is dropped).
    pub(crate) fn stop(&self) {
        if let Some(task) = self.task().take() {
            task.abort();
        }
    }

    /// Whether no watch is left; if so, the task is marked stopped (it then returns).
    fn unwatched(&self) -> bool {
        let mut task = self.task();
        if self.signal.watchers() == 0 {
            *task = None;
            return true;
        }
        false
    }

    /// One listening connection, with the TLS the journal uses.
    async fn session(&self) -> Result<Ended, PostgresError> {
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            return self.session_with(tls.clone()).await;
        }
        self.session_with(tokio_postgres::NoTls).await
    }

    /// Connects, listens, wakes the watches (what was decided before is now visible to the
    /// listing they make), then wakes them on every notification until the connection is
    /// lost or no watch is left.
    async fn session_with<T>(&self, tls: T) -> Result<Ended, PostgresError>
    where
        T: MakeTlsConnect<Socket> + Send + 'static,
        T::Stream: Send + 'static,
        T::TlsConnect: Send,
        <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
    {
        let pg = |e: tokio_postgres::Error| self.redactor.postgres(&e);
        let connecting_at = Instant::now();
        let (client, mut connection) = self.config.connect(tls).await.map_err(pg)?;
        let signal = self.signal.clone();
        // The connection delivers notifications only to whoever polls its messages.
        let driver = tokio::spawn(async move {
            let mut messages = futures_util::stream::poll_fn(|cx| connection.poll_message(cx));
            while let Some(message) = messages.next().await {
                match message {
                    Ok(AsyncMessage::Notification(n)) => {
                        tracing::trace!(approval = n.payload(), "decision notified");
                        signal.notify();
                    }
                    Ok(_) => {}
                    Err(e) => return Some(e),
                }
            }
            None
        });
        let mut driver = AbortOnDrop(driver);
        client
            .batch_execute(&format!("LISTEN {CHANNEL}"))
            .await
            .map_err(pg)?;
        self.signal.notify();
        loop {
            tokio::select! {
                ended = &mut driver.0 => {
                    let error = ended.ok().flatten().map(pg);
                    return Ok(Ended::Lost(error));
                }
                () = tokio::time::sleep(CHECK_EVERY) => {
                    if self.unwatched() {
                        return Ok(Ended::Unwatched);
                    }
                    // The journal's writes met a read-only server since this connection was
                    // made (a standby, an old primary fenced in a failover): it may be that
                    // server, which a decision on the new primary never notifies. Connect
                    // again, through the connection string, to the one that takes writes.
                    if self.redactor.read_only_seen().predates(connecting_at) {
                        return Ok(Ended::Lost(Some(PostgresError::own(
                            "a server refused one of the journal's writes as read-only",
                        ))));
                    }
                    match tokio::time::timeout(CHECK_TIMEOUT, client.simple_query("")).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => return Ok(Ended::Lost(Some(pg(e)))),
                        Err(_) => {
                            return Ok(Ended::Lost(Some(PostgresError::own(
                                "the listening connection stopped answering",
                            ))));
                        }
                    }
                }
            }
        }
    }
}

/// Aborts the connection's driver when the session ends, however it ends.
struct AbortOnDrop(JoinHandle<Option<tokio_postgres::Error>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The listening task: a connection at a time until no watch is left.
async fn listen(listener: Arc<Listener>) {
    let mut backoff = MIN_BACKOFF;
    let mut failing = false;
    loop {
        if listener.unwatched() {
            return;
        }
        match listener.session().await {
            Ok(Ended::Unwatched) => return,
            Ok(Ended::Lost(error)) => {
                // It listened: try again at once.
                backoff = MIN_BACKOFF;
                failing = false;
                let error = error.map_or_else(String::new, |e| e.to_string());
                tracing::warn!(%error, "the approval listener lost its connection; connecting again");
                continue;
            }
            Err(e) => {
                if !failing {
                    tracing::warn!(error = %e, "the approval listener cannot connect; the worker polls at its interval until it can");
                }
                failing = true;
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}
