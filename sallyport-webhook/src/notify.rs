//! Outgoing notifications: a call parked for approval is posted, signed, to a URL the host
//! names (a Slack or Teams incoming webhook behind a small relay, a ticketing bot), with a
//! link to decide. Register a [`Notifier`] with
//! [`ExecutorBuilder::park_notifier`](sallyport_core::executor::ExecutorBuilder::park_notifier).
//!
//! # Wire format (for receivers)
//!
//! `POST <url>`, `Content-Type: application/json`:
//!
//! ```json
//! {"type": "approval.parked", "approval_id": "apr_0193…", "action": "send_invoice",
//!  "summary": "Send one invoice", "effect": "external_commitment", "objects": [{"kind": "customer", "value": "cus_7"}],
//!  "request": "POST https://billing.example.com/v1/invoices/inv_7/send", "required_approvals": 1,
//!  "created_at_ms": 1764943200000, "expires_at_ms": 1765029600000, "decide_url": "https://console.example.com/approvals/apr_0193…"}
//! ```
//!
//! The request is the one the approver sees (the vault's secrets are never in it); the
//! agent's free-text note is not sent. `decide_url` is the host's link template with
//! `{approval_id}` filled in. One header signs the timestamp and the body's exact bytes:
//!
//! ```text
//! Sallyport-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>
//! Sallyport-Signature: t=<unix seconds>,ed25519=<base64 Ed25519 signature of "<t>.<body>">
//! ```
//!
//! the first with a shared secret ([`NotifierBuilder::hmac`], the same scheme as the
//! incoming decisions of [`WebhookReceiver`](crate::WebhookReceiver), so one relay can
//! verify both), the second with the host's Ed25519 key ([`NotifierBuilder::ed25519`]; the
//! receiver holds only the public key). A receiver should refuse a `t` far from its clock.
//!
//! # Delivery
//!
//! Each notification is sent from a task of its own, so parking never waits on the network.
//! A `2xx` answer delivers it; anything else (another status, a refused connection, a
//! timeout of 5 s by default) is tried again after a backoff that doubles (250 ms, 500 ms,
//! 1 s, … by default), up to 5 tries in all. A notification still undelivered is written as a
//! [`DeadLetter`] to the dead-letter file ([`NotifierBuilder::dead_letters`]), which
//! `sallyport approvals dead-letters --file FILE` lists, and logged. The call stays parked
//! either way: a notification is a courtesy, never the decision.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use ed25519_dalek::{Signer as _, SigningKey};
use sallyport_core::approval::Approval;
use sallyport_core::approval::notify::{DeadLetter, ParkNotifier};
use sallyport_core::vault::Secret;
use serde_json::json;

/// How a notification is signed.
enum Signing {
    Hmac(Secret),
    Ed25519(Box<SigningKey>),
}

/// Posts every parked call, signed, to one URL (see the [module](self)).
#[derive(Clone)]
pub struct Notifier {
    inner: Arc<Inner>,
}

struct Inner {
    url: String,
    decide_link: String,
    signing: Signing,
    client: reqwest::Client,
    attempts: u32,
    backoff: Duration,
    timeout: Duration,
    dead_letters: Option<PathBuf>,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("url", &self.inner.url)
            .field("attempts", &self.inner.attempts)
            .finish_non_exhaustive()
    }
}

/// Why a [`Notifier`] cannot be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NotifierError {
    /// Neither [`NotifierBuilder::hmac`] nor [`NotifierBuilder::ed25519`] was set.
    #[error("a notifier signs every message: set an HMAC secret or an Ed25519 key")]
    NoSigningKey,
    /// The HMAC secret is shorter than 16 bytes.
    #[error("the HMAC secret is shorter than 16 bytes")]
    ShortSecret,
    /// The URL is not an `http` or `https` URL.
    #[error("the notification URL must be an http:// or https:// URL")]
    BadUrl,
    /// The HTTP client could not be built.
    #[error("the HTTP client could not be built: {0}")]
    Client(String),
    /// `attempts` is 0.
    #[error("a notifier tries at least once")]
    NoAttempts,
}

/// Builds a [`Notifier`].
#[must_use]
pub struct NotifierBuilder {
    url: String,
    decide_link: String,
    signing: Option<Signing>,
    attempts: u32,
    backoff: Duration,
    timeout: Duration,
    dead_letters: Option<PathBuf>,
}

impl std::fmt::Debug for NotifierBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotifierBuilder")
            .field("url", &self.url)
            .field("attempts", &self.attempts)
            .finish_non_exhaustive()
    }
}

impl Notifier {
    /// A notifier posting to `url`; `decide_link` is the link each message carries, with
    /// `{approval_id}` replaced by the parked call's approval id (the console's
    /// `https://console.example.com/approvals/{approval_id}`, or a bot's own page).
    pub fn builder(url: impl Into<String>, decide_link: impl Into<String>) -> NotifierBuilder {
        NotifierBuilder {
            url: url.into(),
            decide_link: decide_link.into(),
            signing: None,
            attempts: 5,
            backoff: Duration::from_millis(250),
            timeout: Duration::from_secs(5),
            dead_letters: None,
        }
    }

    /// The message for `approval`, as it is sent.
    pub fn message(&self, approval: &Approval) -> Vec<u8> {
        let id = approval.approval_id.as_str();
        let body = json!({
            "type": "approval.parked",
            "approval_id": id,
            "action": approval.action,
            "summary": approval.summary,
            "effect": approval.effect,
            "objects": approval.objects,
            "request": approval.request,
            "required_approvals": approval.required_approvals.max(1),
            "created_at_ms": approval.created_at_ms,
            "expires_at_ms": approval.expires_at_ms,
            "decide_url": self.inner.decide_link.replace("{approval_id}", id),
        });
        serde_json::to_vec(&body).unwrap_or_default()
    }

    /// The `Sallyport-Signature` header for `body` sent at `t` (Unix seconds).
    pub fn signature(&self, t: u64, body: &[u8]) -> String {
        match &self.inner.signing {
            Signing::Hmac(secret) => crate::sign(secret.expose().as_bytes(), t, body),
            Signing::Ed25519(key) => {
                let mut signed = t.to_string().into_bytes();
                signed.push(b'.');
                signed.extend_from_slice(body);
                let signature = key.sign(&signed);
                format!(
                    "t={t},ed25519={}",
                    base64::engine::general_purpose::STANDARD.encode(signature.to_bytes())
                )
            }
        }
    }

    async fn deliver(self, approval_id: String, action: String, body: Vec<u8>) {
        let inner = &self.inner;
        let mut last_error = String::new();
        let mut wait = inner.backoff;
        for attempt in 1..=inner.attempts {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let sent = inner
                .client
                .post(&inner.url)
                .header("content-type", "application/json")
                .header("sallyport-signature", self.signature(t, &body))
                .timeout(inner.timeout)
                .body(body.clone())
                .send()
                .await;
            match sent {
                Ok(answer) if answer.status().is_success() => return,
                Ok(answer) => last_error = format!("HTTP {}", answer.status().as_u16()),
                Err(e) => last_error = describe(&e),
            }
            if attempt < inner.attempts {
                tokio::time::sleep(wait).await;
                wait = wait.saturating_mul(2);
            }
        }
        tracing::warn!(
            approval_id = approval_id.as_str(),
            attempts = inner.attempts,
            error = last_error.as_str(),
            "approval notification not delivered"
        );
        if let Some(path) = &inner.dead_letters {
            let letter = DeadLetter::new(
                approval_id,
                action,
                without_query(&inner.url),
                inner.attempts,
                last_error,
            );
            if let Err(e) = letter.append_to(path) {
                tracing::error!(error = %e, "the dead-letter file could not be written");
            }
        }
    }
}

/// A transport error in words, without its URL (a query may carry a relay's token).
fn describe(error: &reqwest::Error) -> String {
    let what = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "could not connect"
    } else {
        "transport error"
    };
    what.to_owned()
}

fn without_query(url: &str) -> String {
    url.split(['?', '#']).next().unwrap_or(url).to_owned()
}

impl ParkNotifier for Notifier {
    fn parked(&self, approval: &Approval) {
        let body = self.message(approval);
        let id = approval.approval_id.as_str().to_owned();
        let action = approval.action.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(self.clone().deliver(id, action, body));
            }
            Err(_) => tracing::error!(
                approval_id = id.as_str(),
                "approval notification not sent: no Tokio runtime"
            ),
        }
    }
}

impl NotifierBuilder {
    /// Signs with HMAC-SHA256 under `secret` (at least 16 bytes), shared with the receiver.
    pub fn hmac(mut self, secret: Secret) -> Self {
        self.signing = Some(Signing::Hmac(secret));
        self
    }

    /// Signs with the Ed25519 key `key`; the receiver verifies with its public key.
    pub fn ed25519(mut self, key: SigningKey) -> Self {
        self.signing = Some(Signing::Ed25519(Box::new(key)));
        self
    }

    /// Tries in all before a notification becomes a dead letter (default 5).
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts;
        self
    }

    /// The wait after the first failed try, doubled after each (default 250 ms).
    pub fn backoff(mut self, backoff: Duration) -> Self {
        self.backoff = backoff;
        self
    }

    /// How long one try may take (default 5 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Where undelivered notifications are written (JSON lines; see [`DeadLetter`]).
    /// Without it they are only logged.
    pub fn dead_letters(mut self, path: impl Into<PathBuf>) -> Self {
        self.dead_letters = Some(path.into());
        self
    }

    /// The notifier.
    ///
    /// # Errors
    ///
    /// [`NotifierError`]: no signing key, a short secret, a URL that is not `http(s)`, no
    /// tries, or an HTTP client that cannot be built.
    pub fn build(self) -> Result<Notifier, NotifierError> {
        let signing = self.signing.ok_or(NotifierError::NoSigningKey)?;
        if let Signing::Hmac(secret) = &signing
            && secret.expose().len() < 16
        {
            return Err(NotifierError::ShortSecret);
        }
        if !(self.url.starts_with("http://") || self.url.starts_with("https://")) {
            return Err(NotifierError::BadUrl);
        }
        if self.attempts == 0 {
            return Err(NotifierError::NoAttempts);
        }
        // The HTTP channel's client: the platform's roots, no redirects, no proxy.
        let client = sallyport_http::HttpChannel::builder()
            .build()
            .and_then(|channel| channel.client(self.timeout))
            .map_err(|e| NotifierError::Client(e.to_string()))?;
        Ok(Notifier {
            inner: Arc::new(Inner {
                url: self.url,
                decide_link: self.decide_link,
                signing,
                client,
                attempts: self.attempts,
                backoff: self.backoff,
                timeout: self.timeout,
                dead_letters: self.dead_letters,
            }),
        })
    }
}
