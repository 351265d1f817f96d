//! One check's environment: a fresh fault-injecting upstream, an in-memory vault holding the
//! canary credential bound to it, a consent provider that records when it is asked, and an
//! executor over the author's catalog writing to the bench's SQLite journal.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use sallyport_core::channel::{CallView, Channel, ChannelOutcome, Dispatch, PreparedRequest};
use sallyport_core::consent::{ConsentDecision, ConsentProvider, ConsentRequest};
use sallyport_core::journal::{AuditEvent, Journal, SqliteJournal};
use sallyport_core::outcome::ActionResult;
use sallyport_core::outcome::Refusal;
use sallyport_core::target::Target;
use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, MemoryVault, Secret};
use sallyport_core::{Catalog, Executor, RefusalCode, Session, Status};
use sallyport_http::HttpChannel;
use serde_json::Value;

use crate::logs::Logs;
use crate::upstream::{Fault, Timeline, Upstream};

/// A stack trace the upstream returns (the marker is what the bench searches for).
pub(crate) const STACK_TRACE: &str = "Traceback (most recent call last):\n  File \"/srv/tk-internal/billing/app.py\", line 88, in charge\n    raise KeyError(account)\nKeyError: 'acct_internal_991'";
/// An internal URL the upstream returns.
pub(crate) const INTERNAL_URL: &str = "http://10.13.7.42:8443/tk-internal/admin?db=primary";

/// What the bench shares across checks.
pub(crate) struct Env {
    pub(crate) catalog: Catalog,
    pub(crate) journal: Arc<SqliteJournal>,
    pub(crate) canary: String,
    pub(crate) logs: Logs,
    pub(crate) timeout: Duration,
    /// Holds the journal's directory for the bench's lifetime.
    pub(crate) _dir: tempfile::TempDir,
}

/// How the bench's consent provider answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    Approve,
    Deny,
    /// Never answers (the call is dropped while it waits).
    Hang,
}

/// A consent provider that records the timeline number of every ask.
struct BenchConsent {
    answer: Answer,
    timeline: Arc<Timeline>,
    asked: Arc<Mutex<Vec<u64>>>,
}

#[async_trait]
impl ConsentProvider for BenchConsent {
    async fn ask(&self, _request: &ConsentRequest) -> ConsentDecision {
        let at = self.timeline.tick();
        self.asked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(at);
        match self.answer {
            Answer::Approve => ConsentDecision::Approve,
            Answer::Deny => ConsentDecision::Deny {
                reason: Some("denied by the sallyport bench".to_owned()),
            },
            Answer::Hang => std::future::pending().await,
        }
    }

    fn channel(&self) -> &str {
        "sallyport_testkit"
    }
}

/// Stands in for a channel the bench does not run (SSH, an application's own), so the
/// executor over the whole catalog builds; it refuses every call before anything is sent.
struct NotRun {
    name: String,
}

#[async_trait]
impl Channel for NotRun {
    fn name(&self) -> &str {
        &self.name
    }

    fn prepare(&self, _call: &CallView<'_>) -> Result<Box<dyn PreparedRequest>, Refusal> {
        Err(Refusal::new(
            RefusalCode::ChannelUnavailable,
            "the sallyport bench does not run this channel",
        ))
    }

    async fn dispatch(&self, _call: Dispatch<'_>) -> ChannelOutcome {
        ChannelOutcome::new(Status::Rejected)
    }
}

/// One check's running environment.
pub(crate) struct Rig {
    pub(crate) upstream: Upstream,
    pub(crate) executor: Executor,
    asked: Arc<Mutex<Vec<u64>>>,
}

impl Rig {
    /// Starts the upstream with `fault` and builds the executor.
    pub(crate) async fn start(env: &Env, fault: Fault, answer: Answer) -> Result<Self, String> {
        let timeline = Arc::new(Timeline::default());
        let upstream = Upstream::start(fault, Arc::clone(&timeline))
            .await
            .map_err(|e| format!("the bench's upstream could not bind a loopback port: {e}"))?;
        let vault = MemoryVault::new();
        let mut channels = Vec::new();
        for entry in env.catalog.entries() {
            let spec = entry.spec();
            if let Some(name) = &spec.credential {
                vault.set(
                    CredentialMeta::new(
                        name.to_string(),
                        CredentialKind::Bearer,
                        Binding::url(upstream.base_url()),
                    ),
                    Secret::new(env.canary.clone()),
                );
            }
            if let Some(channel) = spec.target.channel_name()
                && !matches!(spec.target, Target::Http(_))
                && !channels.iter().any(|c: &String| c == channel)
            {
                channels.push(channel.to_owned());
            }
        }
        let http = HttpChannel::builder()
            .base_url(upstream.base_url())
            .total_timeout(env.timeout)
            .connect_timeout(Duration::from_secs(2))
            .backoff(Duration::from_millis(5), Duration::from_millis(20))
            .build()
            .map_err(|e| format!("the HTTP channel could not be built: {e}"))?;
        let asked = Arc::new(Mutex::new(Vec::new()));
        let mut builder = Executor::builder(env.catalog.clone())
            .journal_arc(Arc::clone(&env.journal) as Arc<dyn Journal>)
            .vault(vault)
            .channel(http)
            .consent(BenchConsent {
                answer,
                timeline,
                asked: Arc::clone(&asked),
            })
            .consent_timeout(Duration::from_secs(60));
        for name in channels {
            builder = builder.channel(NotRun { name });
        }
        let executor = builder
            .build()
            .map_err(|e| format!("the executor could not be built: {e}"))?;
        Ok(Self {
            upstream,
            executor,
            asked,
        })
    }

    /// The timeline numbers of every consent ask so far.
    pub(crate) fn asked(&self) -> Vec<u64> {
        self.asked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Runs one call with the bench's log capture.
    pub(crate) async fn call(
        &self,
        env: &Env,
        action: &str,
        arguments: Value,
        session: &Session,
    ) -> ActionResult {
        env.logs
            .capture(self.executor.call(action, arguments, session))
            .await
    }
}

/// The audit events of `session`, in chain order.
pub(crate) async fn events_of(env: &Env, session: &Session) -> Result<Vec<AuditEvent>, String> {
    let records = env
        .journal
        .records()
        .await
        .map_err(|e| format!("the journal could not be read: {e}"))?;
    Ok(records
        .into_iter()
        .map(|r| r.event)
        .filter(|e| e.session_id == session.id().as_str())
        .collect())
}

/// Waits (up to 5 s) for an audit event of `session`, e.g. one a dropped call writes on
/// its own.
pub(crate) async fn wait_for_event(
    env: &Env,
    session: &Session,
) -> Result<Vec<AuditEvent>, String> {
    for _ in 0..500 {
        let events = events_of(env, session).await?;
        if !events.is_empty() {
            return Ok(events);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(Vec::new())
}

/// What of the planted sensitive data appears in `text`: the canary (raw, base64, URL-safe
/// base64) when the call bound the credential holding it, the stack trace, the internal URL.
pub(crate) fn leaks(env: &Env, text: &str, credential: bool) -> Vec<&'static str> {
    let canary = env.canary.as_bytes();
    let mut found = Vec::new();
    if !credential {
        // Without a bound credential the canary is no secret of this call: an upstream that
        // "echoes" it merely returns a string.
    } else if text.contains(&env.canary)
        || text.contains(&STANDARD.encode(canary))
        || text.contains(&URL_SAFE_NO_PAD.encode(canary))
    {
        found.push("the credential");
    }
    if text.contains("/srv/tk-internal/") || text.contains("Traceback") {
        found.push("the stack trace");
    }
    if text.contains("10.13.7.42") {
        found.push("the internal URL");
    }
    found
}

/// Short text of a result: `status/code`.
pub(crate) fn outcome(result: &ActionResult) -> String {
    match result.code_str() {
        Some(code) => format!("{}/{code}", result.status),
        None => result.status.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Env {
        let dir = tempfile::tempdir().expect("tempdir");
        let journal = SqliteJournal::open(dir.path().join("j.db")).expect("journal");
        Env {
            catalog: Catalog::builder().build().expect("empty catalog"),
            journal: Arc::new(journal),
            canary: "tkcanary-0123".to_owned(),
            logs: Logs::new(),
            timeout: Duration::from_millis(100),
            _dir: dir,
        }
    }

    #[test]
    fn leaks_find_the_canary_in_its_encodings_the_trace_and_the_internal_url() {
        let env = env();
        assert_eq!(
            leaks(&env, "all clear: [redacted]", true),
            Vec::<&str>::new()
        );
        assert_eq!(leaks(&env, "token tkcanary-0123", true), ["the credential"]);
        assert_eq!(
            leaks(&env, &STANDARD.encode("tkcanary-0123"), true),
            ["the credential"]
        );
        assert_eq!(
            leaks(
                &env,
                &format!("{STACK_TRACE} at {INTERNAL_URL} tkcanary-0123"),
                false
            ),
            ["the stack trace", "the internal URL"]
        );
    }
}
