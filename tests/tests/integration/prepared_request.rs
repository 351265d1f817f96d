//! The request the human approves is the request that is sent, against the real test
//! upstream on 127.0.0.1:0 and a real SQLite journal:
//!
//! - a hand-written request builder runs once per call, however often the request is sent;
//! - every resend carries the exact bytes the human approved;
//! - the consent prompt and the audit record name the real host, resolved from the
//!   credential's binding before anyone is asked;
//! - the intent's fingerprint is the prepared request's: equal for equal requests, different
//!   for different ones;
//! - `preflight` prepares the request without touching the journal.

use std::any::Any;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use sallyport_core::consent::{ConsentDecision, ConsentRequest, FnConsent};
use sallyport_core::journal::AttemptId;
use sallyport_core::journal::{
    AuditEvent, AuditRecord, Intent, Journal, JournalError, SqliteJournal, UnresolvedAttempt,
    VerifyReport,
};
use sallyport_core::outcome::Refusal;
use sallyport_core::target::Target;
use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, MemoryVault, Secret};
use sallyport_core::{Action, Catalog, Executor, Session, Status};
use sallyport_http::{BuildRequest, HttpChannel, RequestParts};
use sallyport_tests::http_server::{Reply, Upstream, audit_event};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Read one note.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_note", effect = observe, credential = "notes-api")]
#[http(get = "/v1/notes/{note_id}", result = Note)]
struct GetNote {
    note_id: String,
}

/// Post one note; the upstream honours the executor's idempotency key.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "post_note", effect = external_commitment, retry = idempotency_key,
         reconcile = "get_note", credential = "notes-api")]
#[http(post = "/v1/notes", result = Note)]
struct PostNote {
    note_id: String,
    text: String,
}

#[derive(Deserialize, Serialize, JsonSchema)]
struct Note {
    note_id: String,
}

/// A hand-written builder that counts how often it runs.
struct Counting(Arc<AtomicU32>);

impl BuildRequest for Counting {
    fn build(
        &self,
        _input: &(dyn Any + Send + Sync),
        arguments: &Value,
    ) -> Result<RequestParts, Refusal> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(RequestParts::new().literal("/v1/notes").json_body(json!({
            "note_id": arguments["note_id"],
            "text": arguments["text"],
        })))
    }
}

const TOKEN: &str = "notes-token-7f3a";

struct Rig {
    upstream: Upstream,
    executor: Executor,
    builds: Arc<AtomicU32>,
    asked: Arc<Mutex<Vec<ConsentRequest>>>,
    journal: std::path::PathBuf,
    calls: Arc<AtomicU32>,
    _dir: tempfile::TempDir,
}

async fn rig(
    reply: impl Fn(&sallyport_tests::http_server::Received) -> Reply + Send + Sync + 'static,
) -> Rig {
    let upstream = Upstream::start(reply).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = dir.path().join("journal.db");
    let vault = Arc::new(MemoryVault::new());
    // The channel has no base URL: the credential's binding says where the request goes.
    vault.set(
        CredentialMeta::new(
            "notes-api",
            CredentialKind::Bearer,
            Binding::url(upstream.url()),
        ),
        Secret::new(TOKEN),
    );
    let builds = Arc::new(AtomicU32::new(0));
    let channel = HttpChannel::builder()
        .backoff(Duration::from_millis(5), Duration::from_millis(10))
        .request_builder("post_note", Counting(Arc::clone(&builds)))
        .build()
        .expect("channel");
    let catalog = Catalog::builder()
        .action::<GetNote>()
        .action_with_spec::<PostNote>(|mut spec| {
            if let Target::Http(t) = &mut spec.target {
                t.custom_request = true;
            }
            spec
        })
        .build()
        .expect("catalog");
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&asked);
    let calls = Arc::new(AtomicU32::new(0));
    let executor = Executor::builder(catalog)
        .journal(Counted {
            inner: SqliteJournal::open(&journal).expect("journal"),
            calls: Arc::clone(&calls),
        })
        .vault_arc(vault)
        .channel(channel)
        .consent(FnConsent::new(move |request: ConsentRequest| {
            seen.lock().expect("asked").push(request);
            async { ConsentDecision::Approve }
        }))
        .build()
        .expect("executor");
    Rig {
        upstream,
        executor,
        builds,
        asked,
        journal,
        calls,
        _dir: dir,
    }
}

impl Rig {
    /// Posts note `n1` with `text` through the executor.
    async fn post(&self, text: &str) -> sallyport_core::outcome::ActionResult {
        self.executor
            .call(
                "post_note",
                json!({"note_id": "n1", "text": text}),
                &session(),
            )
            .await
    }
}

fn session() -> Session {
    Session::new("s1")
}

fn fingerprint(journal: &std::path::Path, attempt: &str) -> String {
    let conn = rusqlite::Connection::open(journal).expect("open journal");
    conn.query_row(
        "SELECT fingerprint FROM attempts WHERE attempt_id = ?1",
        [attempt],
        |r| r.get(0),
    )
    .expect("attempt row")
}

#[tokio::test]
async fn a_hand_written_builder_runs_once_and_every_resend_carries_the_approved_bytes() {
    let r = rig(|req| {
        if req.n == 1 {
            Reply::Json(503, json!({}))
        } else {
            Reply::Json(201, json!({"note_id": "n1"}))
        }
    })
    .await;
    let result = r.post("hello").await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    assert_eq!(
        r.upstream.requests(),
        2,
        "a 503 is resent under the same key"
    );
    assert_eq!(
        r.builds.load(Ordering::SeqCst),
        1,
        "the builder ran once for the call"
    );
    let received = r.upstream.received();
    assert_eq!(received[0].body, received[1].body);
    assert_eq!(received[0].path, received[1].path);
    assert_eq!(
        received[0].header("idempotency-key"),
        received[1].header("idempotency-key")
    );
    assert_eq!(
        received[0].header("authorization"),
        Some(format!("Bearer {TOKEN}").as_str())
    );
}

#[tokio::test]
async fn the_human_and_the_audit_record_see_the_real_host() {
    let r = rig(|_| Reply::Json(201, json!({"note_id": "n1"}))).await;
    let result = r.post("hello").await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    let expected = format!(
        "POST {}/v1/notes body: {{\"note_id\":\"n1\",\"text\":\"hello\"}}",
        r.upstream.url()
    );
    let asked = r.asked.lock().expect("asked").clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].request, expected);
    assert!(!asked[0].render().contains("base URL of credential"));
    let event = audit_event(&r.journal, result.attempt_id.as_str());
    assert_eq!(event["request"], json!(expected));
    assert!(!event.to_string().contains(TOKEN));
}

#[tokio::test]
async fn the_intent_fingerprints_the_prepared_request() {
    let r = rig(|_| Reply::Json(201, json!({"note_id": "n1"}))).await;
    let mut prints = Vec::new();
    for text in ["hello", "hello", "bye"] {
        let result = r.post(text).await;
        assert_eq!(result.status, Status::Completed, "{}", result.to_json());
        prints.push(fingerprint(&r.journal, result.attempt_id.as_str()));
    }
    assert_eq!(prints[0].len(), 64);
    assert!(prints[0].bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(
        prints[0], prints[1],
        "the same request, the same fingerprint"
    );
    assert_ne!(prints[0], prints[2], "another body, another fingerprint");
}

#[tokio::test]
async fn preflight_prepares_the_request_and_never_touches_the_journal() {
    let r = rig(|_| Reply::Json(201, json!({"note_id": "n1"}))).await;
    let ok = r.executor.preflight(
        "post_note",
        json!({"note_id": "n1", "text": "hello"}),
        &session(),
    );
    assert!(ok.is_ok(), "{ok:?}");
    assert_eq!(
        r.builds.load(Ordering::SeqCst),
        1,
        "preflight prepared the request"
    );
    let refused = r
        .executor
        .preflight("post_note", json!({"note_id": "n1"}), &session())
        .expect_err("a missing field is refused");
    assert_eq!(refused.code.as_str(), "invalid_arguments");
    let unknown = r
        .executor
        .preflight("no_such_action", json!({}), &session())
        .expect_err("unknown");
    assert_eq!(unknown.code.as_str(), "unknown_action");
    assert_eq!(
        r.calls.load(Ordering::SeqCst),
        0,
        "preflight used the journal"
    );
    assert_eq!(r.upstream.requests(), 0);
    // A real call does use it (so the counter counts).
    let result = r.post("hello").await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    assert!(r.calls.load(Ordering::SeqCst) >= 2);
}

/// A journal that counts every call made to it.
struct Counted {
    inner: SqliteJournal,
    calls: Arc<AtomicU32>,
}

impl Counted {
    fn count(&self) {
        self.calls.fetch_add(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl Journal for Counted {
    async fn write_intent(&self, intent: &Intent) -> Result<(), JournalError> {
        self.count();
        self.inner.write_intent(intent).await
    }

    fn note_dispatch(&self, attempt: &AttemptId, n: u32) {
        self.count();
        self.inner.note_dispatch(attempt, n);
    }

    async fn append(&self, event: AuditEvent) -> Result<AuditRecord, JournalError> {
        self.count();
        self.inner.append(event).await
    }

    async fn append_with_intent(
        &self,
        intent: Intent,
        event: AuditEvent,
    ) -> Result<AuditRecord, JournalError> {
        self.count();
        self.inner.append_with_intent(intent, event).await
    }

    fn append_detached(&self, event: AuditEvent) {
        self.count();
        self.inner.append_detached(event);
    }

    async fn verify(&self) -> Result<VerifyReport, JournalError> {
        self.count();
        self.inner.verify().await
    }

    async fn records(&self) -> Result<Vec<AuditRecord>, JournalError> {
        self.count();
        self.inner.records().await
    }

    async fn unresolved(&self) -> Result<Vec<UnresolvedAttempt>, JournalError> {
        self.count();
        self.inner.unresolved().await
    }
}
