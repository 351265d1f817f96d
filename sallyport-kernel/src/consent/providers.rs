//! Ready-made consent providers.

use std::future::Future;
#[cfg(unix)]
use std::io::{BufRead, Write};
use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{mpsc, oneshot};

use super::{ConsentDecision, ConsentProvider, ConsentRequest};

/// Denies everything. The safe default for a host with no human attached.
#[derive(Clone, Copy, Debug, Default)]
pub struct DenyAll;

#[async_trait]
impl ConsentProvider for DenyAll {
    fn channel(&self) -> &str {
        "deny_all"
    }

    async fn ask(&self, _request: &ConsentRequest) -> ConsentDecision {
        ConsentDecision::Deny {
            reason: Some("no human approves calls in this deployment".to_owned()),
        }
    }
}

type BoxedAsk =
    dyn Fn(ConsentRequest) -> Pin<Box<dyn Future<Output = ConsentDecision> + Send>> + Send + Sync;

/// Consent from an async closure (a UI callback, a policy, a test script).
///
/// ```
/// use sallyport_core::consent::{ConsentDecision, FnConsent};
/// let consent = FnConsent::new(|request| async move {
///     if request.action.starts_with("get_") {
///         ConsentDecision::Approve
///     } else {
///         ConsentDecision::Deny { reason: None }
///     }
/// });
/// # let _ = consent;
/// ```
pub struct FnConsent {
    ask: Box<BoxedAsk>,
}

impl FnConsent {
    /// Wraps `f`.
    pub fn new<F, Fut>(f: F) -> Self
    where
        F: Fn(ConsentRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ConsentDecision> + Send + 'static,
    {
        Self {
            ask: Box::new(move |r| Box::pin(f(r))),
        }
    }
}

impl std::fmt::Debug for FnConsent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FnConsent").finish_non_exhaustive()
    }
}

#[async_trait]
impl ConsentProvider for FnConsent {
    fn channel(&self) -> &str {
        "closure"
    }

    async fn ask(&self, request: &ConsentRequest) -> ConsentDecision {
        (self.ask)(request.clone()).await
    }
}

/// One consent request waiting in a [`QueueConsent`] for a UI to answer.
#[derive(Debug)]
pub struct PendingConsent {
    /// What to show.
    pub request: ConsentRequest,
    reply: oneshot::Sender<ConsentDecision>,
}

impl PendingConsent {
    /// Answers the request. An answer after the executor gave up is ignored.
    pub fn answer(self, decision: ConsentDecision) {
        let _ = self.reply.send(decision);
    }
}

/// A channel-backed provider: requests are queued for a UI, which answers each one.
///
/// Dropping a [`PendingConsent`] without answering denies it.
#[derive(Debug, Clone)]
pub struct QueueConsent {
    tx: mpsc::Sender<PendingConsent>,
}

/// The UI's end of a [`QueueConsent`].
#[derive(Debug)]
pub struct QueueConsentReceiver {
    rx: mpsc::Receiver<PendingConsent>,
}

impl QueueConsentReceiver {
    /// The next request, or `None` when the provider is gone.
    pub async fn next(&mut self) -> Option<PendingConsent> {
        self.rx.recv().await
    }
}

impl QueueConsent {
    /// A provider and its receiver, with room for `capacity` waiting requests.
    pub fn new(capacity: usize) -> (Self, QueueConsentReceiver) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (Self { tx }, QueueConsentReceiver { rx })
    }
}

#[async_trait]
impl ConsentProvider for QueueConsent {
    fn channel(&self) -> &str {
        "queue"
    }

    async fn ask(&self, request: &ConsentRequest) -> ConsentDecision {
        let (reply, answer) = oneshot::channel();
        let pending = PendingConsent {
            request: request.clone(),
            reply,
        };
        if self.tx.send(pending).await.is_err() {
            return ConsentDecision::Unavailable;
        }
        answer.await.unwrap_or(ConsentDecision::Deny {
            reason: Some("the request was dismissed".to_owned()),
        })
    }
}

/// Asks on the controlling terminal: writes the request ([`ConsentRequest::render`], every
/// field escaped) to `/dev/tty` and reads `y` (this call), `s` (this session, for session
/// actions) or anything else (deny) from it.
///
/// Standard input and output are never used: under a piped harness or a stdio transport they
/// belong to the agent's side, which must not be able to answer. With no controlling
/// terminal (a daemon, a process started with `setsid`, a service), or on a platform without
/// `/dev/tty`, the answer is [`ConsentDecision::Unavailable`] and the executor refuses the
/// call with `consent_unavailable`.
#[derive(Debug, Clone)]
pub struct TerminalConsent {
    session_ttl: Duration,
}

impl Default for TerminalConsent {
    fn default() -> Self {
        Self {
            session_ttl: Duration::from_secs(3600),
        }
    }
}

impl TerminalConsent {
    /// A terminal prompt; session grants last an hour.
    pub fn new() -> Self {
        Self::default()
    }

    /// How long an `s` answer lasts.
    #[must_use]
    pub fn session_ttl(mut self, ttl: Duration) -> Self {
        self.session_ttl = ttl;
        self
    }
}

/// Shows `text` on the controlling terminal and reads one answer line from it; `None` when
/// there is no controlling terminal or it closes.
#[cfg(unix)]
fn ask_controlling_terminal(text: &str) -> Option<String> {
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .ok()?;
    let mut out = &tty;
    write!(
        out,
        "\n--- consent requested ---\n{text}Approve? [y]es / [s]ession / [N]o: "
    )
    .ok()?;
    out.flush().ok()?;
    let mut line = String::new();
    match std::io::BufReader::new(&tty).read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(line.trim().to_ascii_lowercase()),
    }
}

#[cfg(not(unix))]
fn ask_controlling_terminal(_text: &str) -> Option<String> {
    None
}

#[async_trait]
impl ConsentProvider for TerminalConsent {
    fn channel(&self) -> &str {
        "terminal"
    }

    async fn ask(&self, request: &ConsentRequest) -> ConsentDecision {
        let text = request.render();
        let ttl = self.session_ttl;
        let answer = tokio::task::spawn_blocking(move || ask_controlling_terminal(&text))
            .await
            .ok()
            .flatten();
        match answer.as_deref() {
            None => ConsentDecision::Unavailable,
            Some("y" | "yes") => ConsentDecision::Approve,
            Some("s" | "session") => ConsentDecision::ApproveForSession { ttl },
            Some(_) => ConsentDecision::Deny {
                reason: Some("denied at the terminal".to_owned()),
            },
        }
    }
}
